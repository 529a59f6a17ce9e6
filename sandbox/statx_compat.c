/* Loaded into every process of the sandbox image (/etc/ld.so.preload).
 *
 * gVisor's runsc as packaged by Debian bookworm refuses statx(2) with
 * AT_NO_AUTOMOUNT (EINVAL), and coreutils passes that flag on every ls and
 * stat. The flag only stops a stat from triggering an automount, and a
 * sandbox has no automount points, so dropping it changes nothing else, under
 * runc or runsc. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int statx(int dirfd, const char *restrict path, int flags, unsigned int mask, struct statx *restrict buf) {
    return (int)syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
}
