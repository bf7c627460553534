/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The io_uring event loop: one thread runs ferry__loop_run() and every callback runs on it.
 * Requests (accept, connect, recv, send, zero-copy send, sendmsg/recvmsg, poll, close, raw SQEs)
 * and timers are structs the caller embeds in its own objects, so the hot path never allocates.
 *
 * Thread model: a loop belongs to one thread at a time: the thread inside ferry__loop_run(), or,
 * while the loop is not running, the thread that set it up or destroys it. Only
 * ferry__loop_stop() and the two ferry__loop_post*() may be called from any thread.
 *
 * Request lifetime (libuv's rule): when a function that takes a callback returns an error, the
 * callback is never called. When it returns 0, the callback is called exactly once with the final
 * result (a multishot request may be called several times before; see ferry__loop_req_pending()),
 * and the request struct and every buffer it names must stay valid and untouched until then.
 * After the final callback started, the caller owns the request again and may reuse or free it.
 */
#ifndef FERRY_COMMON_LOOP_H
#define FERRY_COMMON_LOOP_H

#include <linux/time_types.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct ferry__loop;
struct ferry__loop_req;
struct ferry__loop_timer;
struct io_uring_sqe;

/* Operation kinds, used by fault injection and for the request's own bookkeeping. */
enum ferry__loop_op {
	FERRY_LOOP_OP_NONE = 0,
	FERRY_LOOP_OP_ACCEPT,
	FERRY_LOOP_OP_CONNECT,
	FERRY_LOOP_OP_RECV,
	FERRY_LOOP_OP_SEND,
	FERRY_LOOP_OP_RECVMSG,
	FERRY_LOOP_OP_SENDMSG,
	FERRY_LOOP_OP_SEND_ZC, /* send_zc and sendmsg_zc */
	FERRY_LOOP_OP_POLL,
	FERRY_LOOP_OP_CLOSE,
	FERRY_LOOP_OP_RAW,
	FERRY_LOOP_OP_COUNT,
};

/*
 * A request's callback. @result is what the operation returns (bytes, a new fd, poll revents,
 * 0) or a negative errno: -ECANCELED after ferry__loop_cancel() or when the loop is destroyed,
 * -ETIMEDOUT when a connect timeout expired.
 */
typedef void (*ferry__loop_cb)(struct ferry__loop_req *req, int result);

/* A request. Zero it once; the submit functions set every private field. */
struct ferry__loop_req {
	void *data; /* the caller's; the loop never touches it */
	/* Private to the loop. */
	ferry__loop_cb cb;	  /* final (and multishot) callback */
	ferry__loop_cb sent_cb;	  /* send_zc: called at the send result, buffer still busy */
	struct ferry__loop *loop; /* owner while pending */
	void *buf;		  /* recv: the buffer, recvmsg: the msghdr (for valgrind) */
	void *delay;		  /* fault injection: the held completion, or NULL */
	struct __kernel_timespec timeout; /* connect: the linked timeout, read at submission */
	int fd;				  /* the fd the operation works on (re-arming) */
	int result;			  /* result kept across CQEs (send_zc, connect) */
	uint32_t arg;			  /* poll: events; accept: flags */
	uint8_t op;			  /* enum ferry__loop_op */
	uint8_t flags;			  /* REQ_* in loop.c */
	uint8_t cqes;			  /* CQEs the kernel still owes this request */
};

typedef void (*ferry__loop_timer_cb)(struct ferry__loop_timer *timer, int status);

/* A timer. Zero it once; ferry__loop_timer_start() sets the rest. */
struct ferry__loop_timer {
	void *data; /* the caller's; the loop never touches it */
	/* Private to the loop. */
	ferry__loop_timer_cb cb;	   /* called when due (0) or at loop destroy (-ECANCELED) */
	struct ferry__loop *loop;	   /* owner while active */
	struct ferry__loop_timer *child;   /* pairing heap: first child */
	struct ferry__loop_timer *sibling; /* pairing heap: next sibling */
	struct ferry__loop_timer *prev;	   /* pairing heap: previous sibling, or parent if first */
	uint64_t due_ns;		   /* CLOCK_MONOTONIC deadline */
	uint64_t repeat_ms;		   /* 0: one-shot */
	uint64_t seq;			   /* start order: breaks ties, stops same-pass re-firing */
	bool active;			   /* in the heap */
};

/* The longest busy-poll window a loop takes (1 s); command lines check against it too. */
#define FERRY_LOOP_MAX_SPIN_US 1000000u

/* Loop creation options; all zeros is the default. */
struct ferry__loop_opts {
	unsigned queue_depth; /* submission queue entries, 0 = 256; the completion queue is 4x */
	unsigned flags;	      /* FERRY_LOOP_* */
	unsigned spin_us;     /* busy poll: after the last completion, poll this long before
			       * sleeping (0 = always sleep; at most 1 s). See loop.c. */
};

/*
 * Busy pollers of this process. A thread that busy-polls holds a CPU; with more of them than
 * CPUs they take turns (sched_yield), and each turn is a context switch on the path of a reply:
 * a TCP pull with both object managers' loops and its caller spinning on 2 cores took 22-27 us
 * at p50 (p99 110-120), 18-19 us (p99 ~45) with the caller asleep; in the soft-RoCE VM, an RDMA
 * pull 0.8-0.9 ms against 0.5-0.6 ms. Loops in their spin window always count in (they make
 * progress for every waiter); a thread that only waits for a result spins while that leaves a
 * CPU to each spinner, and stops as soon as it does not. When none is left to begin with, the
 * choice between sleeping and spinning anyway is measured (ferry__spin_crowded_pick below).
 *
 * ferry__spin_waiter_enter() - count the caller in if a CPU is left for it: true (then call
 * ferry__spin_leave() when done), else false (sleep instead).
 * ferry__spin_crowded() - more spinners than CPUs: a waiter should leave and sleep.
 * ferry__spin_loop_enter() - a loop starts its spin (always counted); ferry__spin_leave() ends it.
 * ferry__spin_cpus() - the CPUs this process may run on (its affinity mask at first use).
 */
bool ferry__spin_waiter_enter(void);
bool ferry__spin_crowded(void);
/* ferry__spin_spare_enter() - count the caller in only if a CPU stays free beside it: for a
 * loop that gives way (ferry__loop_spin_give_way). ferry__spin_full() - as many spinners as
 * CPUs: such a loop leaves. */
bool ferry__spin_spare_enter(void);
bool ferry__spin_full(void);
void ferry__spin_loop_enter(void);
void ferry__spin_leave(void);
unsigned ferry__spin_cpus(void);

/*
 * A waiter that finds no CPU left (ferry__spin_waiter_enter() false) either sleeps and pays a
 * wake-up, or spins anyway and slows the loops it then shares a CPU with. Which costs less is a
 * property of the machine of the moment, not of the code: on this 2-core VM, within one day, a
 * TCP pull with the caller asleep took 18-19 us while spinning took 22-27, and later 20-36 us
 * asleep (p50 swinging run to run) against a steady 18 spinning, as the host's wake-ups grew
 * slower. So the process measures: each crowded wait takes the side that has been faster, and
 * one in FERRY__SPIN_EXPLORE takes the other to keep its figure current (one in
 * FERRY__SPIN_EXPLORE_FAR when the two are more than 2x apart: in the soft-RoCE VM a spinning
 * wait took 2 ms against 0.6 asleep, and each try cost that much).
 *
 * ferry__spin_crowded_pick() - true: spin through this crowded wait; false: sleep.
 * ferry__spin_crowded_report() - how long the wait (from the request to its result) took on
 * side @spun; both sides' typical waits (a running median of each, loop.c) decide the pick.
 * ferry__spin_crowded_avg() - a side's typical wait in ns (within ~6%), 0 before its
 * first report.
 */
#define FERRY__SPIN_EXPLORE 16
#define FERRY__SPIN_EXPLORE_FAR 64
bool ferry__spin_crowded_pick(void);
void ferry__spin_crowded_report(bool spun, uint64_t ns);
uint64_t ferry__spin_crowded_avg(bool spun);

/*
 * FERRY_LOOP_SINGLE_ISSUER: IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN (fewer interrupts, the
 * kernel runs completions only when the loop waits). The ring starts disabled and the first
 * thread to call ferry__loop_run() (or destroy) becomes its only submitter: requests made before
 * run are queued and submitted by it.
 */
#define FERRY_LOOP_SINGLE_ISSUER (1u << 0)

/*
 * ferry__loop_create() - a new loop. Returns 0 and sets *@out, -EINVAL for unknown flags,
 * -ENOMEM, or the errno of io_uring_setup/eventfd.
 */
int ferry__loop_create(const struct ferry__loop_opts *opts, struct ferry__loop **out);

/*
 * ferry__loop_destroy() - cancel everything, then free the loop. Every pending request, active
 * timer and unrun post gets its callback exactly once with -ECANCELED (a close request gets its
 * real result: the fd is gone either way); completions that race with the cancel are turned into
 * -ECANCELED too, and fds they produced (accept) are closed. Waits for every CQE the kernel owes.
 * Callbacks run during destroy may not submit: submit functions return -ECANCELED. Must not be
 * called while ferry__loop_run() is running. No thread may post after it returns. NULL is a no-op.
 */
void ferry__loop_destroy(struct ferry__loop *loop);

/*
 * ferry__loop_run() - run callbacks until ferry__loop_stop(). Returns 0 when stopped, -EBUSY if
 * already running, or a negative errno if io_uring_enter failed for good (logged).
 */
int ferry__loop_run(struct ferry__loop *loop);

/*
 * ferry__loop_thread_run() - the body of a thread that only runs @loop: names the thread @name
 * (what ps, top and gdb show; at most 15 characters), runs the loop, and logs under @comp if
 * it ended in an error.
 */
void ferry__loop_thread_run(struct ferry__loop *loop, const char *name, const char *comp);

/*
 * ferry__loop_stop() - make ferry__loop_run() return after the callbacks of the current pass.
 * Any thread; a stop before run makes the next run return at once. Nothing pending is lost.
 */
void ferry__loop_stop(struct ferry__loop *loop);

/*
 * ferry__loop_submit() - hand the kernel the operations queued so far, now instead of at the
 * end of the pass: for a callback that is about to wait long (a worker's task that waits in a
 * get, while the replies before it are queued). Loop thread. 0 or -errno.
 */
int ferry__loop_submit(struct ferry__loop *loop);

/*
 * ferry__loop_post() - run @fn(@arg, 0) on the loop thread soon. Any thread. Returns 0: @fn is
 * then called exactly once, from a later pass of ferry__loop_run(), or with -ECANCELED from
 * ferry__loop_destroy() if the loop never ran it (a post racing with stop is kept for the next
 * run). Returns -ENOMEM, or -ECANCELED once destroy has begun.
 */
int ferry__loop_post(struct ferry__loop *loop, void (*fn)(void *arg, int status), void *arg);
/*
 * ferry__loop_post_embedded() - ferry__loop_post() with the caller's memory, for a hand-off
 * that must not fail (common/postq.h): @post (no field needs setting) stays the loop's from a
 * 0 return until @fn starts, and must not be posted again before. Returns 0 or -ECANCELED
 * once destroy has begun (@fn is then never called).
 */
struct ferry__loop_post {
	/* Private to the loop. */
	struct ferry__loop_post *next;	   /* the loop's FIFO */
	void (*fn)(void *arg, int status); /* what to run */
	void *arg;			   /* its argument */
	bool embedded;			   /* the caller's memory: not freed after the run */
};
int ferry__loop_post_embedded(struct ferry__loop *loop, struct ferry__loop_post *post,
			      void (*fn)(void *arg, int status), void *arg);
/*
 * ferry__loop_call() - run @fn(@arg) on the loop thread and wait for it: a loop another thread
 * runs (an embedded object manager's setup, a test reading state the loop owns). Any thread
 * but the loop's own (that would wait for itself). Returns @fn's result, or the post's error
 * (-ENOMEM, -ECANCELED: @fn did not run).
 */
int ferry__loop_call(struct ferry__loop *loop, int (*fn)(void *arg), void *arg);

/*
 * ferry__loop_set_poller() - a source of work outside the ring that the loop polls itself while
 * it spins (opts.spin_us), such as an RDMA completion queue: a completion event costs the kernel a
 * softirq, an event queue entry and a poll wake-up per completion (~0.1 ms each in the soft-RoCE
 * VM; ib_send_lat's round trip there is 31 us polled and 272 us with events), where a poll of the
 * queue is a read of shared memory. @poll(@arg, false) runs on every spin pass; @poll(@arg, true)
 * runs before the loop sleeps and must arrange that new work wakes the ring (arm the event) before
 * it polls a last time. It returns how much work it ran: > 0 counts as a busy pass (no sleep, and
 * the spin window starts again). Loop thread only; NULL @poll removes it. Without a spin window the
 * poller is never called (the loop sleeps at once; the source must keep its event armed).
 */
void ferry__loop_set_poller(struct ferry__loop *loop, int (*poll)(void *arg, bool sleeping),
			    void *arg);

/* ferry__loop_spin_us() - the loop's busy-poll window (opts.spin_us), 0 if it always sleeps. */
unsigned ferry__loop_spin_us(const struct ferry__loop *loop);
/*
 * ferry__loop_spin_give_way() - from now on @loop spins only while a CPU of the process stays
 * free beside it, and stops as soon as none does: for a loop whose spin shortens its own
 * replies but which is not on the data path, such as a node's loop when the object manager
 * has a loop of its own: on 2 CPUs, that loop spinning after each seal notice or GCS reply
 * held one of the two CPUs the object manager's loop and the caller waiting for a pull needed
 * (measured in bench/results-2026-11-29.md). Any thread.
 */
void ferry__loop_spin_give_way(struct ferry__loop *loop);

/* ferry__loop_now_ms() - the monotonic clock in milliseconds, as timers see it. */
uint64_t ferry__loop_now_ms(void);

/*
 * Timers, ordered by deadline then by start order. Millisecond resolution; the loop sleeps in
 * io_uring_enter until the earliest deadline (no busy wait, no kernel timeout objects).
 *
 * ferry__loop_timer_start() - call @cb(@timer, 0) in @timeout_ms, then every @repeat_ms if not
 * 0. Restarts an active timer. Returns 0 or -ECANCELED during destroy.
 * ferry__loop_timer_stop() - stop it; the callback is not called. Returns 0, or -ENOENT if it
 * was not active. Safe from its own callback (a repeating timer then stops).
 */
int ferry__loop_timer_start(struct ferry__loop *loop, struct ferry__loop_timer *timer,
			    uint64_t timeout_ms, uint64_t repeat_ms, ferry__loop_timer_cb cb);
int ferry__loop_timer_stop(struct ferry__loop_timer *timer);
static inline bool ferry__loop_timer_active(const struct ferry__loop_timer *timer)
{
	return timer->active;
}

/*
 * Requests. Each returns 0 (the callback will be called) or a negative errno (it will not):
 * -EBUSY if @req is still pending, -ECANCELED during destroy, -EAGAIN if the submission queue
 * stays full after a flush, -EINVAL for bad arguments. Buffers stay the caller's and must stay
 * valid until the final callback.
 */

/*
 * ferry__loop_accept() - accept connections on listening socket @fd (SOCK_CLOEXEC). Multishot:
 * @cb gets each new fd (>= 0) with ferry__loop_req_pending() still true, until a final negative
 * result (an error, or -ECANCELED after ferry__loop_cancel()). If the kernel ends the multishot
 * early the loop re-arms it. The callee owns every fd it is given.
 */
int ferry__loop_accept(struct ferry__loop *loop, struct ferry__loop_req *req, int fd,
		       ferry__loop_cb cb);

/*
 * ferry__loop_connect() - connect socket @fd to @addr, which must stay valid until the callback.
 * @timeout_ms 0 waits as long as the kernel does; otherwise a linked timeout turns a connect
 * still pending after @timeout_ms into -ETIMEDOUT.
 */
int ferry__loop_connect(struct ferry__loop *loop, struct ferry__loop_req *req, int fd,
			const struct sockaddr *addr, socklen_t addrlen, unsigned timeout_ms,
			ferry__loop_cb cb);

/* ferry__loop_recv() / ferry__loop_send() - one recv(2)/send(2); result = bytes (0 = EOF). */
int ferry__loop_recv(struct ferry__loop *loop, struct ferry__loop_req *req, int fd, void *buf,
		     size_t len, int flags, ferry__loop_cb cb);
int ferry__loop_send(struct ferry__loop *loop, struct ferry__loop_req *req, int fd, const void *buf,
		     size_t len, int flags, ferry__loop_cb cb);

/*
 * ferry__loop_recvmsg() / ferry__loop_sendmsg() - recvmsg(2)/sendmsg(2), e.g. for SCM_RIGHTS.
 * @msg, its iovecs, name and control buffers must stay valid until the callback; the kernel
 * updates @msg->msg_controllen and @msg->msg_flags in place.
 */
int ferry__loop_recvmsg(struct ferry__loop *loop, struct ferry__loop_req *req, int fd,
			struct msghdr *msg, int flags, ferry__loop_cb cb);
int ferry__loop_sendmsg(struct ferry__loop *loop, struct ferry__loop_req *req, int fd,
			const struct msghdr *msg, int flags, ferry__loop_cb cb);

/*
 * ferry__loop_send_zc() / ferry__loop_sendmsg_zc() - zero-copy send (IORING_OP_SEND_ZC /
 * SENDMSG_ZC). The kernel posts two completions: the send result, then a notification once it
 * no longer reads the buffer. @sent_cb (may be NULL) is called with the send result at the
 * first: the next send may be issued then, but the buffer is still the kernel's. @cb is the final
 * callback, called after the notification with the same result: only then may the buffer be
 * reused. Unix sockets do not support it (-EOPNOTSUPP in the callback).
 */
int ferry__loop_send_zc(struct ferry__loop *loop, struct ferry__loop_req *req, int fd,
			const void *buf, size_t len, int flags, ferry__loop_cb sent_cb,
			ferry__loop_cb cb);
int ferry__loop_sendmsg_zc(struct ferry__loop *loop, struct ferry__loop_req *req, int fd,
			   const struct msghdr *msg, int flags, ferry__loop_cb sent_cb,
			   ferry__loop_cb cb);

/*
 * ferry__loop_poll() - wait for @events (POLLIN, ...) on any fd (e.g. the RDMA completion
 * channel); result = revents. With @multishot, @cb gets every readiness with
 * ferry__loop_req_pending() true until cancelled (final -ECANCELED) or an error.
 */
int ferry__loop_poll(struct ferry__loop *loop, struct ferry__loop_req *req, int fd, unsigned events,
		     bool multishot, ferry__loop_cb cb);

/* ferry__loop_close() - close(2) @fd asynchronously; result 0 or -errno. The fd is gone either
 * way. Cancel pending requests on @fd first (ferry__loop_cancel_fd()). */
int ferry__loop_close(struct ferry__loop *loop, struct ferry__loop_req *req, int fd,
		      ferry__loop_cb cb);

/*
 * ferry__loop_raw() - an SQE bound to @req for an operation this header does not wrap (fsync,
 * write to a file, ...). The caller must prep it at once with an io_uring_prep_*() function and
 * must not set IOSQE_IO_LINK or change user_data. Returns NULL and sets *@err (same errors as
 * the other requests) if it cannot; the callback is then never called. The final callback comes
 * with the first CQE without IORING_CQE_F_MORE; earlier ones are delivered as multishot results.
 * Memory the kernel writes is invisible to valgrind: mark it with ferry__loop_mark_defined().
 */
struct io_uring_sqe *ferry__loop_raw(struct ferry__loop *loop, struct ferry__loop_req *req,
				     ferry__loop_cb cb, int *err);

/*
 * ferry__loop_cancel() - ask the kernel to cancel @req. Asynchronous: the callback still comes,
 * with -ECANCELED, or with the real result if the operation finished first. Returns 0, -ENOENT
 * if @req is not pending, -EALREADY if a cancel is already on its way, -EAGAIN if the queue is
 * full. A cancelled multishot request is not re-armed.
 */
int ferry__loop_cancel(struct ferry__loop_req *req);

/* ferry__loop_cancel_fd() - cancel every request on @fd (same semantics). Returns 0 or -errno. */
int ferry__loop_cancel_fd(struct ferry__loop *loop, int fd);

/* ferry__loop_req_pending() - true from a successful submit until the final callback starts.
 * Inside a multishot callback: true if more callbacks will follow. */
static inline bool ferry__loop_req_pending(const struct ferry__loop_req *req)
{
	return req->loop != NULL;
}

/*
 * Fault injection (tests, and transport tests through the same API). The next @count
 * completions of @op are altered: @result, if not 0, replaces the result (a multishot request is
 * then ended with it: cancelled in the kernel, further results dropped, accepted fds closed);
 * @delay_ms, if not 0, holds the final callback that long (single-shot operations other than
 * zero-copy sends). Data a replaced recv received is dropped. Loop thread only; a new call
 * replaces the armed fault.
 */
struct ferry__loop_fault {
	enum ferry__loop_op op; /* which operation */
	unsigned count;		/* how many completions to alter, 0 disarms */
	int result;		/* replacement result (negative errno) or 0 to keep it */
	unsigned delay_ms;	/* hold the completion this long, 0 for none */
};
int ferry__loop_inject(struct ferry__loop *loop, const struct ferry__loop_fault *fault);

/* ferry__loop_mark_defined() - tell valgrind the kernel wrote @len bytes at @buf (no-op
 * without valgrind). The loop does it itself for recv and recvmsg. */
void ferry__loop_mark_defined(const void *buf, size_t len);

/* ferry__loop_inflight() - SQEs whose final CQE has not arrived yet (tests, diagnostics). */
unsigned ferry__loop_inflight(const struct ferry__loop *loop);

#endif
