"""A seccomp filter every command runs under: no new namespaces. Runs INSIDE
the container, one of the executor's modules (sandbox/guest_loader.py;
stdlib only).

Under runc, dockerd's default seccomp profile already refuses namespaces to
a process without CAP_SYS_ADMIN. Under gVisor that profile guards the
sandbox's kernel from the host, not the commands from that kernel, and
gVisor's kernel lets an unprivileged user make a user namespace (root inside
it). Loading the container's profile inside gVisor (runsc --oci-seccomp)
also refuses select(2), so ``read -t`` in bash fails; this filter refuses
only what it names. The executor installs it in each command's child after
the capabilities are gone and before exec; a filter is inherited and cannot
be removed.
"""

import ctypes
import os
import struct

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
_LD_ABS_W, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38
# seccomp_data: nr at 0, arch at 4, args from 16 (the low half of args[0]
# on these little-endian machines).
_NR, _ARCH, _ARG0 = 0, 4, 16
NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
# machine: (audit arch, unshare, setns, clone, clone3, lowest x32 number)
_TABLES = {
    "x86_64": (0xC000003E, 272, 308, 56, 435, 0x40000000),
    "aarch64": (0xC00000B7, 97, 268, 220, 435, None),
}


def filter_program(machine):
    """The filter as (code, jt, jf, k) instructions, or None for a machine
    without a table (the container's own profile still applies there)."""
    if machine not in _TABLES:
        return None
    arch, unshare, setns, clone, clone3, x32 = _TABLES[machine]
    refuse = (_RET_K, 0, 0, _ERRNO | EPERM)
    program = [(_LD_ABS_W, 0, 0, _ARCH), (_JEQ_K, 1, 0, arch), refuse, (_LD_ABS_W, 0, 0, _NR)]
    if x32 is not None:  # the x32 ABI's numbers reach the same calls
        program += [(_JGE_K, 0, 1, x32), refuse]
    for number in (unshare, setns):
        program += [(_JEQ_K, 0, 1, number), refuse]
    # clone3 passes its flags in memory a filter cannot read: ENOSYS makes
    # glibc fall back to clone, whose flags it can.
    program += [(_JEQ_K, 0, 1, clone3), (_RET_K, 0, 0, _ERRNO | ENOSYS)]
    program += [(_JEQ_K, 0, 3, clone), (_LD_ABS_W, 0, 0, _ARG0), (_JSET_K, 0, 1, NAMESPACE_FLAGS), refuse,
                (_RET_K, 0, 0, _ALLOW)]
    return program


def install_command_filter():
    """Install the filter in this process; False where none is built."""
    program = filter_program(os.uname().machine)
    if program is None:
        return False
    code = b"".join(struct.pack("=HBBI", *instruction) for instruction in program)
    buffer = ctypes.create_string_buffer(code, len(code))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")
    return True
