/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A job's code for the owner's tests (test_submit.c), loaded by the real ferry-worker: add
 * sums two int64s, fail reports an error, twice doubles an int64 (to chain tasks through
 * refs), kill_once is SIGKILLed on its first try (the marker file named by its argument tells
 * a retry apart) and always_killed on every try. nest, relay, fan and hand_out submit tasks
 * from inside a task (tests/integration/runtime/test_nested.c); hang stays running
 * (test_owner_death.c); lend, lend_pending, pass_on and stash lend and borrow refs
 * (test_borrow.c); in_bundle logs where and how many ran at once (test_pg.c); where and big
 * place tasks (test_placement.c); the actor class Spot says where it runs
 * (test_actor_death.c); poke_owner misbehaves on its owner's parked socket (test_submit.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <ferry/runtime.h>

static int int64_arg(struct ferry_task_ctx *ctx, size_t i, int64_t *out)
{
	const void *p;
	size_t n;

	if (ferry_task_arg(ctx, i, &p, &n) < 0 || n != sizeof(*out))
		return -EINVAL;
	memcpy(out, p, sizeof(*out));
	return 0;
}

FERRY_FUNCTION(add)
{
	int64_t a, b, sum;

	if (int64_arg(ctx, 0, &a) < 0 || int64_arg(ctx, 1, &b) < 0)
		return ferry_task_error(ctx, "add takes two int64 arguments");
	sum = a + b;
	return ferry_task_return(ctx, 0, &sum, sizeof(sum));
}

FERRY_FUNCTION(twice)
{
	int64_t a;

	if (int64_arg(ctx, 0, &a) < 0)
		return ferry_task_error(ctx, "twice takes one int64 argument");
	a *= 2;
	return ferry_task_return(ctx, 0, &a, sizeof(a));
}

FERRY_FUNCTION(fail)
{
	ferry_task_error(ctx, "bad input %d", 7);
	return -EINVAL;
}

/* Argument @i as a NUL-terminated path in @path (@size bytes). 0 or -EINVAL. */
static int path_arg(struct ferry_task_ctx *ctx, size_t i, char *path, size_t size)
{
	const void *p;
	size_t n;

	if (ferry_task_arg(ctx, i, &p, &n) < 0 || n == 0 || n >= size)
		return -EINVAL;
	memcpy(path, p, n);
	path[n] = 0;
	return 0;
}

/* The marker file @arg 0 (a path): absent, it is made and the worker dies. */
FERRY_FUNCTION(kill_once)
{
	char path[256];
	int fd;

	if (path_arg(ctx, 0, path, sizeof(path)) < 0)
		return ferry_task_error(ctx, "kill_once takes a path");
	fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
	if (fd >= 0) {
		close(fd);
		raise(SIGKILL);
	}
	return ferry_task_return(ctx, 0, "survived", 8);
}

FERRY_FUNCTION(always_killed)
{
	(void)ctx;
	raise(SIGKILL);
	return 0;
}

/* ---- tasks that submit tasks (tests/integration/runtime/test_nested.c) ---- */

/* The int64 of @ref, then the ref dropped. */
static int get_int64(struct ferry_ref *ref, int64_t *out)
{
	struct ferry_view v;
	int ret = ferry_get(ref, -1, &v);

	if (ret == 0 && v.len != sizeof(*out))
		ret = -EBADMSG;
	if (ret == 0)
		memcpy(out, v.data, sizeof(*out));
	ferry_release(&v);
	ferry_ref_drop(ref);
	return ret;
}

/* nest(n): n levels of tasks, each waiting in ferry_get for the one below: returns n. Deeper
 * than the node's CPUs, it ends only if a waiting worker lends its CPU. */
FERRY_FUNCTION(nest)
{
	struct ferry_ref below;
	int64_t n, got = 0;
	int ret;

	if (int64_arg(ctx, 0, &n) < 0)
		return ferry_task_error(ctx, "nest takes an int64");
	if (n > 0) {
		int64_t m = n - 1;
		struct ferry_arg a = {.data = &m, .len = sizeof(m)};

		ret = ferry_submit("nest", &a, 1, NULL, &below);
		if (ret == 0)
			ret = get_int64(&below, &got);
		if (ret < 0)
			return ferry_task_error(ctx, "nest(%lld): its subtask: %s", (long long)m,
						ferry_strerror(ret));
		n = got + 1;
	}
	return ferry_task_return(ctx, 0, &n, sizeof(n));
}

/* relay(x): puts x (in the store, owned by this worker), passes that ref to twice, passes
 * twice's return (in this worker's memory store) and the put's ref on to add: 3x. */
FERRY_FUNCTION(relay)
{
	struct ferry_ref put, doubled, sum;
	int64_t x, out = 0;
	int ret;

	if (int64_arg(ctx, 0, &x) < 0)
		return ferry_task_error(ctx, "relay takes an int64");
	ret = ferry_put(&x, sizeof(x), &put);
	if (ret < 0)
		return ferry_task_error(ctx, "put: %s", ferry_strerror(ret));
	ret = ferry_submit("twice", &(struct ferry_arg){.ref = &put}, 1, NULL, &doubled);
	if (ret == 0) {
		struct ferry_arg args[2] = {{.ref = &doubled}, {.ref = &put}};

		ret = ferry_submit("add", args, 2, NULL, &sum);
		ferry_ref_drop(&doubled);
		if (ret == 0)
			ret = get_int64(&sum, &out);
	}
	ferry_ref_drop(&put);
	if (ret < 0)
		return ferry_task_error(ctx, "relay: %s", ferry_strerror(ret));
	return ferry_task_return(ctx, 0, &out, sizeof(out));
}

/* fan(n): n add(i, i) subtasks, ferry_wait for all, their sum (n(n-1)). */
FERRY_FUNCTION(fan)
{
	struct ferry_ref refs[64];
	int ready[64];
	int64_t n, sum = 0, one = 0;
	int ret = 0, k = 0;

	if (int64_arg(ctx, 0, &n) < 0 || n < 0 || n > 64)
		return ferry_task_error(ctx, "fan takes an int64 of 0..64");
	for (; k < n && ret == 0; k++) {
		int64_t i = k;
		struct ferry_arg args[2] = {{.data = &i, .len = sizeof(i)},
					    {.data = &i, .len = sizeof(i)}};

		ret = ferry_submit("add", args, 2, NULL, &refs[k]);
	}
	if (ret < 0)
		k--;
	if (ret == 0 && ferry_wait(refs, (size_t)k, (size_t)k, -1, ready) != k)
		ret = -EIO;
	for (int i = 0; i < k; i++) {
		if (ret == 0)
			ret = get_int64(&refs[i], &one);
		else
			ferry_ref_drop(&refs[i]);
		sum += one;
	}
	if (ret < 0)
		return ferry_task_error(ctx, "fan: %s", ferry_strerror(ret));
	return ferry_task_return(ctx, 0, &sum, sizeof(sum));
}

/* hand_out(x): puts x and returns the ref itself (its bytes); the worker keeps its count, so
 * the caller can get the object (from the store) while the worker lives. */
FERRY_FUNCTION(hand_out)
{
	struct ferry_ref put;
	int64_t x;
	int ret;

	if (int64_arg(ctx, 0, &x) < 0)
		return ferry_task_error(ctx, "hand_out takes an int64");
	ret = ferry_put(&x, sizeof(x), &put);
	if (ret < 0)
		return ferry_task_error(ctx, "put: %s", ferry_strerror(ret));
	return ferry_task_return(ctx, 0, &put, sizeof(put));
}

/* hang(path): writes its pid to the file @path, then sleeps a minute (a task that is running
 * when its driver is killed: tests/integration/runtime/test_owner_death.c). */
FERRY_FUNCTION(hang)
{
	char path[256], pid[32];
	int fd, len;

	if (path_arg(ctx, 0, path, sizeof(path)) < 0)
		return ferry_task_error(ctx, "hang takes a path");
	len = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, pid, (size_t)len) != len)
		return ferry_task_error(ctx, "hang: cannot write %s", path);
	close(fd);
	for (int i = 0; i < 600; i++)
		usleep(100 * 1000);
	return ferry_task_return(ctx, 0, "woke", 4);
}

/* ---- owners and borrowers (tests/integration/runtime/test_borrow.c) ---- */

/* What lend and lend_pending return: a ref this worker owns, and the worker's pid. */
struct lent {
	struct ferry_ref ref;
	int32_t pid;
};

/* nap(ms): sleeps, returns ms. */
FERRY_FUNCTION(nap)
{
	int64_t ms;

	if (int64_arg(ctx, 0, &ms) < 0 || ms < 0 || ms > 60000)
		return ferry_task_error(ctx, "nap takes 0..60000 ms");
	usleep((useconds_t)ms * 1000);
	return ferry_task_return(ctx, 0, &ms, sizeof(ms));
}

/* where(ms, ...): sleeps ms, returns the ID of the node it ran on (placement tests); further
 * arguments (inputs) are ignored. */
FERRY_FUNCTION(where)
{
	struct ferry_node_id node;
	int64_t ms;

	if (int64_arg(ctx, 0, &ms) < 0 || ms < 0 || ms > 60000)
		return ferry_task_error(ctx, "where takes 0..60000 ms");
	usleep((useconds_t)ms * 1000);
	if (ferry_task_node_id(ctx, &node) < 0)
		return ferry_task_error(ctx, "no node");
	return ferry_task_return(ctx, 0, &node, sizeof(node));
}

/* worker_pid() -> the int64 pid of the worker that ran it. */
FERRY_FUNCTION(worker_pid)
{
	int64_t pid = getpid();

	return ferry_task_return(ctx, 0, &pid, sizeof(pid));
}

/* The sockets an owner dialled to this worker: accepted on a listener with a path (the
 * worker's connection to its node was dialled, so its own end has none), into @fds. */
static int owner_sockets(int *fds, int max)
{
	int n = 0;

	for (int fd = 3; fd < 1024 && n < max; fd++) {
		struct sockaddr_un sa;
		socklen_t len = sizeof(sa);
		int listening = 0;
		socklen_t optlen = sizeof(listening);

		if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &optlen) < 0 || listening)
			continue;
		if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0 || sa.sun_family != AF_UNIX ||
		    len <= offsetof(struct sockaddr_un, sun_path) || !sa.sun_path[0])
			continue;
		fds[n++] = fd;
	}
	return n;
}

struct poke {
	int fd;		  /* the owner's socket */
	int64_t kind;	  /* 0: send bytes, 1: send garbage, 2: shut the socket down */
	int64_t delay_ms; /* after the task returned */
	size_t len;	  /* bytes (kind 0) */
	uint8_t bytes[];  /* ... */
};

static void *poke_later(void *arg)
{
	static const uint8_t garbage[64] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	struct poke *p = arg;

	usleep((useconds_t)p->delay_ms * 1000);
	if (p->kind == 0)
		(void)!write(p->fd, p->bytes, p->len);
	else if (p->kind == 1)
		(void)!write(p->fd, garbage, sizeof(garbage));
	else
		shutdown(p->fd, SHUT_RDWR);
	free(p);
	return NULL;
}

/* poke_owner(kind, delay_ms[, bytes]) -> the int64 count of owner sockets found (the test
 * wants 1). delay_ms after it returned, when the owner has given the lease back and parked
 * the socket, the worker misbehaves on it behind its runtime's back: it sends @bytes (kind 0,
 * a frame the test built), garbage (1), or shuts the socket down (2). */
FERRY_FUNCTION(poke_owner)
{
	int64_t kind, delay_ms, found;
	const void *bytes = NULL;
	size_t len = 0;
	struct poke *p;
	pthread_t t;
	int fds[4];

	if (int64_arg(ctx, 0, &kind) < 0 || int64_arg(ctx, 1, &delay_ms) < 0 ||
	    (kind == 0 && ferry_task_arg(ctx, 2, &bytes, &len) < 0))
		return ferry_task_error(ctx, "poke_owner takes kind, delay_ms[, bytes]");
	found = owner_sockets(fds, 4);
	if (found == 1 && (p = malloc(sizeof(*p) + len))) {
		p->fd = fds[0];
		p->kind = kind;
		p->delay_ms = delay_ms;
		p->len = len;
		if (len)
			memcpy(p->bytes, bytes, len);
		if (pthread_create(&t, NULL, poke_later, p) == 0)
			pthread_detach(t);
		else
			free(p);
	}
	return ferry_task_return(ctx, 0, &found, sizeof(found));
}

/* big(mib): a return of mib MiB (in the store of the node that ran it). */
FERRY_FUNCTION(big)
{
	int64_t mib;
	void *buf;
	int ret;

	if (int64_arg(ctx, 0, &mib) < 0 || mib < 1 || mib > 64)
		return ferry_task_error(ctx, "big takes 1..64 MiB");
	ret = ferry_task_return_alloc(ctx, 0, (size_t)mib << 20, &buf);
	if (ret < 0)
		return ret;
	memset(buf, 7, (size_t)mib << 20);
	return 0;
}

/* arg_len(input): the byte length of its input (a ref pulled to its node when made
 * elsewhere), as an int64: the store tests read a large object where it was not made. */
FERRY_FUNCTION(arg_len)
{
	const void *p;
	size_t n;
	int64_t len;

	if (ferry_task_arg(ctx, 0, &p, &n) < 0)
		return ferry_task_error(ctx, "arg_len takes one argument");
	len = (int64_t)n;
	return ferry_task_return(ctx, 0, &len, sizeof(len));
}

/* big_tally(path, mib[, max_runs]): appends a line to the file @path (a test counts the runs),
 * returns mib MiB of a fixed pattern (byte i: i * 31 + 7, a test hashes it) in its node's
 * store; with max_runs, a run after that many fails instead (an error, not retried). */
FERRY_FUNCTION(big_tally)
{
	char path[256];
	uint8_t *buf;
	int64_t mib, runs, max_runs;
	int fd, ret;

	if (path_arg(ctx, 0, path, sizeof(path)) < 0 || int64_arg(ctx, 1, &mib) < 0 || mib < 1 ||
	    mib > 64)
		return ferry_task_error(ctx, "big_tally takes a path and 1..64 MiB");
	fd = open(path, O_CREAT | O_APPEND | O_WRONLY | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, "ran\n", 4) != 4) {
		if (fd >= 0)
			close(fd);
		return ferry_task_error(ctx, "big_tally: cannot append to %s", path);
	}
	runs = lseek(fd, 0, SEEK_END) / 4;
	close(fd);
	if (int64_arg(ctx, 2, &max_runs) == 0 && runs > max_runs)
		return ferry_task_error(ctx, "big_tally: run %lld of at most %lld", (long long)runs,
					(long long)max_runs);
	ret = ferry_task_return_alloc(ctx, 0, (size_t)mib << 20, (void **)&buf);
	if (ret < 0)
		return ret;
	for (size_t i = 0; i < (size_t)mib << 20; i++)
		buf[i] = (uint8_t)(i * 31 + 7);
	return 0;
}

static int lend_ref(struct ferry_task_ctx *ctx, const char *fn, int64_t x)
{
	int64_t zero = 0;
	struct ferry_arg args[2] = {{.data = &x, .len = sizeof(x)},
				    {.data = &zero, .len = sizeof(zero)}};
	struct lent out = {.pid = (int32_t)getpid()};
	int ret = ferry_submit(fn, args, !strcmp(fn, "add") ? 2 : 1, NULL, &out.ref);

	if (ret < 0)
		return ferry_task_error(ctx, "submit %s: %s", fn, ferry_strerror(ret));
	/* Its count stays with this worker: the ref outlives the task. */
	return ferry_task_return(ctx, 0, &out, sizeof(out));
}

/* lend(x): the ref of add(x, 0), a small return in this worker's memory store. */
FERRY_FUNCTION(lend)
{
	int64_t x;

	if (int64_arg(ctx, 0, &x) < 0)
		return ferry_task_error(ctx, "lend takes an int64");
	return lend_ref(ctx, "add", x);
}

/* lend_pending(ms): the ref of nap(ms), at once: still pending when the caller gets it. */
FERRY_FUNCTION(lend_pending)
{
	int64_t ms;

	if (int64_arg(ctx, 0, &ms) < 0)
		return ferry_task_error(ctx, "lend_pending takes an int64");
	return lend_ref(ctx, "nap", ms);
}

/* stash(ref bytes): keeps a ferry_ref_dup of a ref it was given (a borrow), past the task;
 * returns the worker's pid. */
static struct ferry_ref stashed;

FERRY_FUNCTION(stash)
{
	struct ferry_ref given;
	const void *p;
	size_t n;
	int32_t pid = (int32_t)getpid();
	int ret;

	if (ferry_task_arg(ctx, 0, &p, &n) < 0 || n != sizeof(given))
		return ferry_task_error(ctx, "stash takes a struct ferry_ref");
	memcpy(&given, p, sizeof(given));
	ret = ferry_ref_dup(&given, &stashed);
	if (ret < 0)
		return ferry_task_error(ctx, "dup: %s", ferry_strerror(ret));
	return ferry_task_return(ctx, 0, &pid, sizeof(pid));
}

/* pass_on(ref bytes): passes a ref it was given (not its own: a borrow) on to twice; returns
 * twice's int64. */
FERRY_FUNCTION(pass_on)
{
	struct ferry_ref given, doubled;
	const void *p;
	size_t n;
	int64_t out = 0;
	int ret;

	if (ferry_task_arg(ctx, 0, &p, &n) < 0 || n != sizeof(given))
		return ferry_task_error(ctx, "pass_on takes a struct ferry_ref");
	memcpy(&given, p, sizeof(given));
	ret = ferry_submit("twice", &(struct ferry_arg){.ref = &given}, 1, NULL, &doubled);
	if (ret == 0)
		ret = get_int64(&doubled, &out);
	if (ret < 0)
		return ferry_task_error(ctx, "pass_on: %s", ferry_strerror(ret));
	return ferry_task_return(ctx, 0, &out, sizeof(out));
}

/* await_ref(ref bytes): gets the int64 of a ref given by value (not resolved before the task
 * runs: the task waits in its get), returns it. */
FERRY_FUNCTION(await_ref)
{
	struct ferry_ref given;
	const void *p;
	size_t n;
	int64_t out = 0;
	int ret;

	if (ferry_task_arg(ctx, 0, &p, &n) < 0 || n != sizeof(given))
		return ferry_task_error(ctx, "await_ref takes a struct ferry_ref");
	memcpy(&given, p, sizeof(given));
	ret = get_int64(&given, &out);
	if (ret < 0)
		return ferry_task_error(ctx, "await_ref: %s", ferry_strerror(ret));
	return ferry_task_return(ctx, 0, &out, sizeof(out));
}

/* tally(path, x): appends a line to the file @path (a test counts the runs), returns 2x. */
FERRY_FUNCTION(tally)
{
	char path[256];
	int64_t x;
	int fd;

	if (path_arg(ctx, 0, path, sizeof(path)) < 0 || int64_arg(ctx, 1, &x) < 0)
		return ferry_task_error(ctx, "tally takes a path and an int64");
	fd = open(path, O_CREAT | O_APPEND | O_WRONLY | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, "ran\n", 4) != 4) {
		if (fd >= 0)
			close(fd);
		return ferry_task_error(ctx, "tally: cannot append to %s", path);
	}
	close(fd);
	x *= 2;
	return ferry_task_return(ctx, 0, &x, sizeof(x));
}

/* echo(bytes): returns its argument (a large one tests what does not fit a ring's slot). */
FERRY_FUNCTION(echo)
{
	const void *p;
	size_t n;

	if (ferry_task_arg(ctx, 0, &p, &n) < 0)
		return ferry_task_error(ctx, "echo takes one argument");
	return ferry_task_return(ctx, 0, p, n);
}

/* in_bundle(path, ms): appends "+ <its node's store socket>" to @path, sleeps @ms, appends
 * "-": a test counts how many ran at once, and where (tests/integration/runtime/test_pg.c). */
FERRY_FUNCTION(in_bundle)
{
	const char *store = getenv("FERRY_NODE_STORE_SOCKET");
	char path[256], line[320];
	int64_t ms;
	int fd, len, ok;

	if (path_arg(ctx, 0, path, sizeof(path)) < 0 || int64_arg(ctx, 1, &ms) < 0 || ms < 0 ||
	    ms > 10000)
		return ferry_task_error(ctx, "in_bundle takes a path and 0..10000 ms");
	fd = open(path, O_CREAT | O_APPEND | O_WRONLY | O_CLOEXEC, 0600);
	if (fd < 0)
		return ferry_task_error(ctx, "in_bundle: cannot open %s", path);
	len = snprintf(line, sizeof(line), "+ %s\n", store ? store : "?");
	ok = write(fd, line, (size_t)len) == len;
	usleep((useconds_t)ms * 1000);
	ok = ok && write(fd, "-\n", 2) == 2;
	close(fd);
	if (!ok)
		return ferry_task_error(ctx, "in_bundle: cannot append to %s", path);
	return ferry_task_return(ctx, 0, &ms, sizeof(ms));
}

/* Spot(start[, ms]): an actor that says where it runs (test_actor_death.c); its constructor
 * sleeps @ms. next() returns start + the calls to next so far (its state, from the
 * constructor's argument: a restart begins again), where(ms) sleeps @ms and returns the ID of
 * its node. */
FERRY_ACTOR_CLASS(Spot, free)
{
	int64_t *n = malloc(sizeof(*n)), ms = 0;

	if (!n)
		return -ENOMEM;
	if (int64_arg(ctx, 0, n) < 0 || (ferry_task_num_args(ctx) > 1 &&
					 (int64_arg(ctx, 1, &ms) < 0 || ms < 0 || ms > 60000))) {
		free(n);
		return ferry_task_error(ctx, "Spot takes an int64 start and 0..60000 ms");
	}
	usleep((useconds_t)ms * 1000);
	*state = n;
	return 0;
}

FERRY_ACTOR_METHOD(Spot, next)
{
	int64_t *n = ferry_actor_state(ctx);

	++*n;
	return ferry_task_return(ctx, 0, n, sizeof(*n));
}

FERRY_ACTOR_METHOD(Spot, where)
{
	struct ferry_node_id node;
	int64_t ms;

	if (int64_arg(ctx, 0, &ms) < 0 || ms < 0 || ms > 60000)
		return ferry_task_error(ctx, "Spot.where takes 0..60000 ms");
	usleep((useconds_t)ms * 1000);
	if (ferry_task_node_id(ctx, &node) < 0)
		return ferry_task_error(ctx, "no node");
	return ferry_task_return(ctx, 0, &node, sizeof(node));
}
