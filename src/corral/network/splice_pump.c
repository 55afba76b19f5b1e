/* The bulk loop of network/splice.py (its `_drive`), in C so that it runs without the GIL.
 *
 * splice.py calls corral_pump_drive once per bulk direction, from the thread that direction has
 * of its own, through ctypes (which releases the GIL for the whole call). The Python loop takes
 * the GIL back after every splice and poll: in the daemon, whose event loop and other threads
 * run Python, each of those waits up to the interpreter's switch interval, which halved the
 * proxies' throughput in bench/README.md's measurement. This loop is the same state machine as
 * `_Pump.move` + `_Pump.waits_for` + `_drive`, on the same struct layout as `splice._State`:
 * it moves until the direction is done (source ended and pipe drained, or `limit` bytes moved),
 * until `stopped` is set (checked between moves) or `stop_fd` is readable (wakes a wait), until
 * nothing moved for `idle_ms` (negative: no limit), or until a system call fails.
 *
 * Returns 0 when done, 1 when stopped, 2 after `idle_ms` without movement, -errno on failure.
 * `moved`, `in_pipe` and `ended` are kept up to date in the struct whatever it returns. It
 * allocates nothing, keeps no state of its own and touches no descriptor it was not given.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct corral_pump {
    int32_t src, dst, read_end, write_end;
    int64_t capacity;  /* bytes the pipe holds */
    int64_t limit;     /* bytes to move in all; negative: to the end of src */
    int64_t moved, in_pipe;
    int32_t ended;     /* src has nothing more to give (its end, or the limit taken) */
    volatile int32_t stopped;  /* set by another thread: return between two moves */
};

#define FLAGS (SPLICE_F_MOVE | SPLICE_F_NONBLOCK)

/* One splice in and one out, as far as both sides allow: 1 if anything moved, 0 if not,
 * -errno on failure. */
static int move_once(struct corral_pump *p) {
    int progress = 0;
    if (!p->ended && p->in_pipe < p->capacity) {
        int64_t want = p->capacity - p->in_pipe;
        if (p->limit >= 0 && p->limit - p->moved - p->in_pipe < want)
            want = p->limit - p->moved - p->in_pipe;
        ssize_t got = want > 0 ? splice(p->src, NULL, p->write_end, NULL, (size_t)want, FLAGS) : 0;
        if (got == 0) {  /* the end of src, or the limit already in the pipe */
            p->ended = 1;
        } else if (got > 0) {
            p->in_pipe += got;
            progress = 1;
            if (p->limit >= 0 && p->moved + p->in_pipe >= p->limit)
                p->ended = 1;
        } else if (errno != EAGAIN && errno != EINTR) {
            return -errno;
        }
    }
    if (p->in_pipe) {
        ssize_t sent = splice(p->read_end, NULL, p->dst, NULL, (size_t)p->in_pipe, FLAGS);
        if (sent > 0) {
            p->in_pipe -= sent;
            p->moved += sent;
            progress = 1;
        } else if (sent < 0 && errno != EAGAIN && errno != EINTR) {
            return -errno;
        }
    }
    return progress;
}

int corral_pump_drive(struct corral_pump *p, int stop_fd, int idle_ms) {
    while (!(p->ended && !p->in_pipe)) {
        if (p->stopped)
            return 1;
        int moved = move_once(p);
        if (moved < 0)
            return moved;
        if (moved)
            continue;
        struct pollfd fds[3] = {{.fd = stop_fd, .events = POLLIN}};
        nfds_t count = 1;
        if (p->ended || p->in_pipe >= p->capacity) {
            fds[count++] = (struct pollfd){.fd = p->dst, .events = POLLOUT};
        } else {
            fds[count++] = (struct pollfd){.fd = p->src, .events = POLLIN};
            if (p->in_pipe)
                fds[count++] = (struct pollfd){.fd = p->dst, .events = POLLOUT};
        }
        int ready = poll(fds, count, idle_ms < 0 ? -1 : idle_ms);
        if (ready < 0 && errno != EINTR)
            return -errno;
        if (ready == 0)
            return 2;
        if (ready > 0 && fds[0].revents)
            return 1;
    }
    return 0;
}
