/* jepsen-lite clock shim: LD_PRELOAD into one redis-server to skew its wall clock.
 *
 * Only CLOCK_REALTIME(_COARSE), gettimeofday and time are changed; CLOCK_MONOTONIC (Redis's
 * event loop) passes through. Real time comes from raw syscalls and the control file is
 * mmapped once by the constructor: no malloc, no dlsym, so jemalloc never recurses into us
 * (libfaketime hangs Debian's redis-server for exactly that reason).
 *
 * Control file ($JEPSEN_LITE_CLOCK_FILE), three little-endian int64 read on every call:
 *   offset_ns, rate_ppm, t0_ns   ->   fake = real + offset + (real - t0) * rate_ppm / 1e6
 * The harness rewrites the bytes in place (never truncates: a read past EOF is SIGBUS).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

struct ctl {
    volatile int64_t offset_ns;
    volatile int64_t rate_ppm;
    volatile int64_t t0_ns;
};

static const struct ctl *ctl;

__attribute__((constructor)) static void jl_init(void) {
    const char *path = getenv("JEPSEN_LITE_CLOCK_FILE");
    if (!path) return;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY);
    if (fd < 0) return;
    void *p = mmap(NULL, sizeof(struct ctl), PROT_READ, MAP_SHARED, fd, 0);
    syscall(SYS_close, fd);
    if (p != MAP_FAILED) ctl = p;
}

static int64_t jl_adjust(int64_t real) {
    if (!ctl) return real;
    int64_t rate = ctl->rate_ppm;
    int64_t fake = real + ctl->offset_ns;
    if (rate) fake += (real - ctl->t0_ns) * rate / 1000000;
    return fake;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    long rc = syscall(SYS_clock_gettime, id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        int64_t ns = jl_adjust((int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec);
        ts->tv_sec = ns / 1000000000LL;
        ts->tv_nsec = ns % 1000000000LL;
    }
    return (int)rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz;
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
    if (tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return 0;
}

time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
