/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The task runtime: functions that run as tasks in worker processes, found by a registered
 * name, object refs between them, a driver's side that submits tasks, actors, and compiled
 * graphs of actor-method calls.
 *
 * Code by name. A task names its function by a string, never by a pointer, because it runs in
 * another process (a worker on this host or another). Every process that may run a function
 * registers it under the same name: the driver and the job's shared library both define it
 * with FERRY_FUNCTION(), which registers it when the code is loaded (before main, or when a
 * worker loads the job's library). Calling a name that a worker has not registered fails with
 * an error naming the function and the node, never a crash.
 *
 * Thread model: ferry_register_function() may be called from any thread at any time (library
 * constructors run it while other threads work); registration cannot be undone, so a loaded
 * library's code must stay loaded.
 */
#ifndef FERRY_RUNTIME_H
#define FERRY_RUNTIME_H

#include <ferry/common.h>
#include <ferry/id.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A name: 1 to FERRY_FUNCTION_NAME_MAX bytes of letters, digits and "_.:-/" ("Counter.inc",
 * "models/predict"). */
#define FERRY_FUNCTION_NAME_MAX 127

/* The running task, handed to its function; its accessors arrive with tasks. */
struct ferry_task_ctx;

/* A task function: returns 0, or -errno (its returns then hold the error). */
typedef int (*ferry_task_fn)(struct ferry_task_ctx *ctx);

/*
 * ferry_register_function() - register @fn under @name in this process.
 * Registering the same name with the same function again is a no-op. Returns 0; -EINVAL for a
 * bad name or a NULL @fn; -EEXIST if @name is registered to another function (the first stays,
 * and ferry_init() will refuse to start: two functions of one name is a build mistake that
 * would run different code in different processes); -ENOMEM. Each error is logged.
 */
FERRY_API int ferry_register_function(const char *name, ferry_task_fn fn);

/*
 * FERRY_FUNCTION(name) { body } - define a task function and register it as "name" when this
 * code is loaded. The body sees `struct ferry_task_ctx *ctx` and returns 0 or -errno:
 *
 *     FERRY_FUNCTION(add)
 *     {
 *             ...
 *             return 0;
 *     }
 *
 * The C function itself is static (ferry__fn_add): it is called through the runtime by name.
 */
#define FERRY_FUNCTION(name)                                                  \
	static int ferry__fn_##name(struct ferry_task_ctx *ctx);              \
	__attribute__((constructor)) static void ferry__register_##name(void) \
	{                                                                     \
		(void)ferry_register_function(#name, ferry__fn_##name);       \
	}                                                                     \
	static int ferry__fn_##name(struct ferry_task_ctx *ctx)

/*
 * ferry_register_worker_setup() / FERRY_WORKER_SETUP(name) { body } - a function run once in
 * each worker process when it loads the job's library, before its first task (multiprocessing's
 * Pool initializer). It returns 0 or -errno (with ferry_task_error(NULL, ...) for a message); a
 * worker whose setup failed is not used, and the lease's error names the function. One per
 * process: registering a second one is -EEXIST.
 */
typedef int (*ferry_setup_fn)(void);
FERRY_API int ferry_register_worker_setup(const char *name, ferry_setup_fn fn);

#define FERRY_WORKER_SETUP(name)                                                    \
	static int ferry__setup_##name(void);                                       \
	__attribute__((constructor)) static void ferry__register_setup_##name(void) \
	{                                                                           \
		(void)ferry_register_worker_setup(#name, ferry__setup_##name);      \
	}                                                                           \
	static int ferry__setup_##name(void)

/* ---- inside a task: its arguments and returns ---- */

/* ferry_task_node_id() - the node whose worker runs the task (where it was placed) into
 * *@out. 0, or -EINVAL (not a running task's ctx). */
FERRY_API int ferry_task_node_id(const struct ferry_task_ctx *ctx, struct ferry_node_id *out);

/* The number of arguments of the running task, and argument @i's bytes (a ref argument is
 * resolved to its object's bytes before the function runs; the bytes stay valid until the
 * function returns). 0, or -EINVAL (@i out of range). */
FERRY_API size_t ferry_task_num_args(const struct ferry_task_ctx *ctx);
FERRY_API int ferry_task_arg(const struct ferry_task_ctx *ctx, size_t i, const void **data,
			     size_t *len);

/* Return value @i (0-based, < the submit's num_returns): copied now (ferry_task_return), or
 * written in place into @len bytes at *@buf (ferry_task_return_alloc: in the store for large
 * values). A return left unset holds zero bytes. 0, -EINVAL, -EEXIST (set twice), -ENOMEM,
 * -ENOSPC (the store is full). */
FERRY_API size_t ferry_task_num_returns(const struct ferry_task_ctx *ctx);
FERRY_API int ferry_task_return(struct ferry_task_ctx *ctx, size_t i, const void *data, size_t len);
FERRY_API int ferry_task_return_alloc(struct ferry_task_ctx *ctx, size_t i, size_t len, void **buf);

/* ferry_task_error() - the message that the task's returns hold when it returns -errno (the
 * caller's ferry_get shows it with the function's name and node). @ctx NULL: the worker setup
 * function's. Returns -EREMOTEIO for convenience: `return ferry_task_error(ctx, "...")`. */
FERRY_API int ferry_task_error(struct ferry_task_ctx *ctx, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ---- the driver's side (any process that submits: drivers, and tasks in workers) ---- */

/* Options of ferry_init(); all zeros is a local cluster in this process. */
struct ferry_init_opts {
	const char *address;   /* a GCS "host:port", or "auto" (the cluster `ferry start` left
				* in $FERRY_RUN_DIR); NULL: $FERRY_ADDRESS, else a local
				* cluster in this process (a GCS and one node). Joining goes
				* through the node on this host, found in the GCS's nodes
				* table; the token is $FERRY_TOKEN_FILE's, else the one the
				* run directory names */
	const char *node;      /* joining a host that runs several nodes: the one to join, by
				* its ID (hex, as `ferry status` shows it, or a unique prefix),
				* its store socket's path, or "node-N" (the name `ferry start`
				* gave it in the run directory); NULL: $FERRY_NODE, else the first
				* that fits (logged, with the others). Naming no live node of
				* this host is -ENOENT, an ambiguous prefix -EINVAL (both log
				* the candidates). The local cluster ignores it */
	const char *code_path; /* the job's shared library (its FERRY_FUNCTIONs), stored in the
				* GCS by content hash for nodes whose host lacks it; NULL:
				* $FERRY_CODE; neither: this process only puts and gets */
	uint64_t inline_max;   /* arguments and returns up to this many bytes travel inline,
				* larger ones through the store; 0: 100 KiB */
	uint64_t memory_bytes; /* the local cluster's store; 0: 256 MiB */
	uint32_t num_workers;  /* the local cluster's prestarted workers; 0: its CPUs */
};

/* ferry_init() - join a cluster (or start the local one) as a driver of a new job. 0, -EALREADY,
 * -EEXIST (a function name registered twice), -ENOENT (code_path; or no node of the cluster
 * runs on this host, or none that opts.node names), -EINVAL (opts.node is a prefix of several
 * nodes' IDs), -EFBIG (code_path larger than the GCS stores: 256 MiB), or the
 * cluster's -errno (-ETIMEDOUT, -ECONNREFUSED: the GCS does not answer; -EACCES: the token);
 * each logged. Thread-safe; every call below needs it first (else -ENOTCONN). */
FERRY_API int ferry_init(const struct ferry_init_opts *opts);
/* ferry_shutdown() - end the job: drop its refs and leases, stop the local cluster if this
 * process started one. Nothing of it is left after (threads, fds, files, objects). */
FERRY_API void ferry_shutdown(void);

/* An object reference (a future): names an object and its owner. Each ferry_ref a call hands
 * out holds one count on the object: give it back with ferry_ref_drop(); ferry_ref_dup() takes
 * another. The object leaves every store when no process holds a count on it. */
struct ferry_ref {
	struct ferry_object_id id;
	struct ferry_worker_id owner;
};
FERRY_API int ferry_ref_dup(const struct ferry_ref *ref, struct ferry_ref *out);
FERRY_API void ferry_ref_drop(struct ferry_ref *ref);

/* A task argument: @len bytes at @data (copied at submit), or the object of @ref. */
struct ferry_arg {
	const void *data;
	size_t len;
	const struct ferry_ref *ref;
};

struct ferry_pg;
struct ferry_placement_group_id;

/* Where a task goes (struct ferry_task_opts.strategy). */
enum ferry_sched_strategy {
	FERRY_SCHED_DEFAULT = 0,
	FERRY_SCHED_SPREAD = 1,
	FERRY_SCHED_NODE_AFFINITY = 2,
};

/* Task options; all zeros: 1 return, 1 CPU, 3 retries of a crashed worker, none of errors. */
struct ferry_task_opts {
	uint32_t num_returns;  /* 0: 1 */
	double num_cpus;       /* 0: 1; fractional allowed */
	double num_gpus;       /* 0: none */
	double memory_bytes;   /* 0: none */
	const char *resources; /* custom ones, "name=amount,..."; NULL: none */
	int32_t max_retries;   /* retries after a worker died; 0: 3; < 0: none */
	int retry_exceptions;  /* 1: also retry a function that returned -errno */
	/* Placement (issue 24). DEFAULT: on the submitter's node when it has room and no other
	 * node holds clearly more of the task's input bytes, else where the scheduler says.
	 * SPREAD: where the scheduler says. NODE_AFFINITY: on affinity_node; hard (the
	 * default): the task fails with -EHOSTUNREACH if that node is not alive; soft
	 * (affinity_soft 1): elsewhere when it is dead or full. */
	enum ferry_sched_strategy strategy;
	struct ferry_node_id affinity_node;
	int affinity_soft;

	/* Run in this placement group's reservation (NULL: none), in its bundle pg_bundle
	 * (-1: any bundle with room). */
	const struct ferry_pg *pg;
	int32_t pg_bundle;
};

/* ferry_submit() - run function @name with @args as a task; its num_returns refs into
 * @returns. 0, -EINVAL, -ENOMEM, -ENOTCONN, -ENOEXEC (ferry_init named no job library). The
 * task's own failures show in its returns. */
FERRY_API int ferry_submit(const char *name, const struct ferry_arg *args, size_t nargs,
			   const struct ferry_task_opts *opts, struct ferry_ref *returns);

/* ferry_put() copies @len bytes into a new object; ferry_create() + ferry_seal() write one in
 * place (@len bytes at *@buf, until sealed). 0, -ENOSPC, -ENOMEM, -ENOTCONN, -EINVAL. */
FERRY_API int ferry_put(const void *data, size_t len, struct ferry_ref *out);
FERRY_API int ferry_create(size_t len, void **buf, struct ferry_ref *out);
FERRY_API int ferry_seal(const struct ferry_ref *ref);

/* ferry_put_refs() - ferry_put() of bytes that hold refs (e.g. an array of struct ferry_ref):
 * the new object keeps the objects of @refs[0..@nrefs) alive, one count each, until it is
 * itself dropped, so that a process that reads a ref out of it can get that object, or keep
 * it with ferry_ref_dup. The refs must be this process's own. 0, -EINVAL (a ref of another
 * owner, or of an object whose counts are all gone), or ferry_put()'s errors. */
FERRY_API int ferry_put_refs(const void *data, size_t len, const struct ferry_ref *refs,
			     size_t nrefs, struct ferry_ref *out);

/* A read-only view of an object, pinned until ferry_release(). */
struct ferry_view {
	const void *data;
	size_t len;
	char error[256]; /* when get fails with the task's error: function, node, message */
	uint64_t priv[4];
};

/* ferry_get() - wait up to @timeout_ms (< 0: forever) for @ref's object and view it. 0;
 * -ETIMEDOUT; the task's -errno (the function's own, -EPIPE: its worker died, with the signal
 * in @out->error; -ENOENT: no function of that name on the worker's node); -EOWNERDEAD (the
 * object's owner died). */
FERRY_API int ferry_get(const struct ferry_ref *ref, int64_t timeout_ms, struct ferry_view *out);
FERRY_API void ferry_release(struct ferry_view *view);

/* ferry_wait() - wait until @num_ready of @refs[0..@n) are ready (a value or an error) or
 * @timeout_ms passes; @ready[i] says which. Returns how many are ready, or -errno. */
FERRY_API int ferry_wait(const struct ferry_ref *refs, size_t n, size_t num_ready,
			 int64_t timeout_ms, int *ready);

/*
 * Completion on the caller's loop. ferry_on_ready() queues @fn(@arg, ref, status) for when @ref
 * is ready; the callbacks run in ferry_run_completions(), on the caller's thread, never on the
 * runtime's. ferry_completion_fd() is an eventfd that is readable while callbacks wait: poll
 * it with epoll or io_uring, then call ferry_run_completions() (returns how many ran).
 */
typedef void (*ferry_ready_fn)(void *arg, const struct ferry_ref *ref, int status);
FERRY_API int ferry_on_ready(const struct ferry_ref *ref, ferry_ready_fn fn, void *arg);
FERRY_API int ferry_completion_fd(void);
FERRY_API int ferry_run_completions(void);

/* ---- actors ---- */

/*
 * An actor: an instance of a class registered by name, living in one worker process (a lease
 * its owner keeps for the actor's life), whose methods run there one at a time, in the order
 * each caller made them (or several at once: ferry_actor_opts.max_concurrency). Like functions, classes and methods are found by name, so the
 * driver's code and the job's library define them with the same macros:
 *
 *     static void counter_free(void *state) { free(state); }
 *
 *     FERRY_ACTOR_CLASS(Counter, counter_free)      constructor: sets *state
 *     {
 *             int64_t *n = calloc(1, sizeof(*n));   ... read ferry_task_arg(ctx, ...) ...
 *             *state = n;
 *             return n ? 0 : -ENOMEM;
 *     }
 *
 *     FERRY_ACTOR_METHOD(Counter, inc)              registered as "Counter.inc"
 *     {
 *             int64_t *n = ferry_actor_state(ctx);
 *             ...
 *     }
 *
 * The destructor (NULL for none) runs when the actor is killed, when its owner goes away, and
 * when its worker exits; never after a SIGKILL, of course.
 */
typedef int (*ferry_actor_init_fn)(struct ferry_task_ctx *ctx, void **state);
typedef void (*ferry_actor_fini_fn)(void *state);

/* ferry_register_actor_class() - register class @name (a function name's rules, no '.').
 * 0; -EINVAL; -EEXIST (another constructor under that name); -ENOMEM. Each error logged. */
FERRY_API int ferry_register_actor_class(const char *name, ferry_actor_init_fn init,
					 ferry_actor_fini_fn fini);

#define FERRY_ACTOR_CLASS(cls, fini)                                                   \
	static int ferry__actor_init_##cls(struct ferry_task_ctx *ctx, void **state);  \
	__attribute__((constructor)) static void ferry__register_actor_##cls(void)     \
	{                                                                              \
		(void)ferry_register_actor_class(#cls, ferry__actor_init_##cls, fini); \
	}                                                                              \
	static int ferry__actor_init_##cls(struct ferry_task_ctx *ctx, void **state)

#define FERRY_ACTOR_METHOD(cls, method)                                                          \
	static int ferry__method_##cls##_##method(struct ferry_task_ctx *ctx);                   \
	__attribute__((constructor)) static void ferry__register_method_##cls##_##method(void)   \
	{                                                                                        \
		(void)ferry_register_function(#cls "." #method, ferry__method_##cls##_##method); \
	}                                                                                        \
	static int ferry__method_##cls##_##method(struct ferry_task_ctx *ctx)

/* ferry_actor_state() - inside a method: the state its actor's constructor set; NULL in a
 * task that is not an actor's method. */
FERRY_API void *ferry_actor_state(const struct ferry_task_ctx *ctx);

/* A handle on an actor (ferry_actor_create, ferry_actor_get_named); give it back with
 * ferry_actor_drop(). */
struct ferry_actor;

/* The most calls an actor runs at once (ferry_actor_opts.max_concurrency). */
#define FERRY_ACTOR_MAX_CONCURRENCY 64

/* Actor options; all zeros: 1 CPU, no restart, unnamed, one call at a time. */
struct ferry_actor_opts {
	double num_cpus;	  /* 0: 1; fractional allowed */
	double num_gpus;	  /* 0: none */
	double memory_bytes;	  /* 0: none */
	const char *resources;	  /* custom ones, "name=amount,..."; NULL: none */
	int32_t max_restarts;	  /* restarts after its worker died; 0: none; < 0: unlimited */
	const char *name;	  /* NULL: unnamed; else unique among the cluster's live actors,
				   * found by ferry_actor_get_named() from any driver */
	uint32_t max_concurrency; /* 0 or 1: one call at a time, each caller's in the order
				   * made. N > 1 (up to FERRY_ACTOR_MAX_CONCURRENCY): up to N
				   * calls at once on N threads of the actor's worker (Ray's
				   * max_concurrency); no order is then promised, not even
				   * per caller, and the methods must be thread-safe (the
				   * state is shared; ferry_task_* work from each thread) */
	int detached;		  /* 1: it outlives its creator (needs a name): dropping the
				   * handle or the creator's exit (even a crash) leaves it
				   * alive, found by name from any driver; only
				   * ferry_actor_kill, from any handle, ends it. It restarts
				   * (max_restarts) only while its creator runs: after that
				   * its worker's death makes it DEAD */

	/* Its lease from this placement group's reservation (NULL: none), in its bundle
	 * pg_bundle (-1: any bundle with room). */
	const struct ferry_pg *pg;
	int32_t pg_bundle;

	/* Placement (issue 24), as struct ferry_task_opts's, at create and at each restart:
	 * DEFAULT (the creator's node when it has room, else where the scheduler says),
	 * SPREAD, NODE_AFFINITY to affinity_node (hard: the actor is DEAD with -EHOSTUNREACH
	 * naming the node when it is not alive; soft: elsewhere when it is dead or full). */
	enum ferry_sched_strategy strategy;
	struct ferry_node_id affinity_node;
	int affinity_soft;
	int32_t max_task_retries; /* a call in flight when the actor's worker (or node) died
				   * runs again on the restarted actor this many times; 0:
				   * none (it fails with -EPIPE); < 0: unlimited */
};

/*
 * ferry_actor_create() - create an actor of class @cls, its constructor run with @args in a
 * worker leased for it. Returns once it is recorded (PENDING) in the GCS's actors table: calls
 * made before it is ALIVE wait for it. 0; -EINVAL; -EEXIST (@opts->name is taken); -ENOMEM;
 * -ENOTCONN; -ENOEXEC (no job library); the GCS's -errno. A constructor that fails makes the
 * actor DEAD: every call then fails with -ESRCH and the constructor's error.
 * Lifetime: the actor lives while its creator (the owner) does, unless @opts->detached (then
 * until a ferry_actor_kill; -EINVAL without a name).
 */
FERRY_API int ferry_actor_create(const char *cls, const struct ferry_arg *args, size_t nargs,
				 const struct ferry_actor_opts *opts, struct ferry_actor **out);

/* ferry_actor_get_named() - a handle on the live actor named @name (created by any driver of
 * the cluster on this host's node). 0; -ENOENT; -EINVAL; -ENOMEM; -ENOTCONN. */
FERRY_API int ferry_actor_get_named(const char *name, struct ferry_actor **out);

/*
 * ferry_actor_call() - call @method of @actor with @args; its @num_returns (0: 1) refs into
 * @returns, as ferry_submit. Calls made through one process run in the order made (unless
 * the actor was created with max_concurrency > 1: then they may run at once). A call's
 * own failures show in its returns: -EPIPE (the actor's worker or its node died while it was
 * in flight, and the owner's max_task_retries did not run it again on the restarted actor:
 * the error names the method, the node and the signal), -ESRCH (the actor is dead: killed,
 * out of restarts, or its constructor failed; the error says which), -EHOSTUNREACH (its hard
 * NODE_AFFINITY node is not alive), -ENOENT (no such method). Returns 0, -EINVAL, -ENOMEM,
 * -ENOTCONN.
 */
FERRY_API int ferry_actor_call(struct ferry_actor *actor, const char *method,
			       const struct ferry_arg *args, size_t nargs, uint32_t num_returns,
			       struct ferry_ref *returns);

/* ferry_actor_kill() - end the actor: its destructor runs and its worker goes back to the
 * node. With @no_restart 0 it is restarted (constructor rerun on a new worker) if restarts
 * are left, as after a crash (the owner's handle only). Calls queued behind the kill fail
 * with -ESRCH. 0, -EINVAL, -ENOTCONN, -EPERM (a handle from ferry_actor_get_named on an actor
 * that is not detached: only the owner kills it). */
FERRY_API int ferry_actor_kill(struct ferry_actor *actor, int no_restart);

/* ferry_actor_id() - the actor's ID (its key in the GCS's actors table). */
FERRY_API int ferry_actor_id(const struct ferry_actor *actor, struct ferry_actor_id *out);

/* ferry_actor_drop() - give the handle back. The owner's handle going kills the actor (Ray's
 * "out of scope"), unless it is detached; calls already made still complete. This process's
 * record of the actor is freed once the actor is dead too. NULL is a no-op. */
FERRY_API void ferry_actor_drop(struct ferry_actor *actor);

/* ---- compiled graphs ---- */

/*
 * A compiled graph (Ray's compiled graphs): actor-method calls bound once into a graph whose
 * arguments are constants, the graph's inputs, or earlier calls' results; compiled once, which
 * installs the plan in the workers of its actors; then executed many times: the inputs go
 * straight to the workers that take them, each result straight to the worker that needs it,
 * the output straight back. An execution makes no lease, no task and no ref in the owner: it
 * costs one frame per edge that crosses processes.
 *
 *     struct ferry_graph *g;
 *     ferry_graph_create(&g);
 *     int n0 = ferry_graph_bind(g, a, "Counter.inc", (struct ferry_graph_arg[]){
 *                                  FERRY_GRAPH_INPUT(0)}, 1);
 *     ferry_graph_bind(g, b, "Counter.add", (struct ferry_graph_arg[]){
 *                         FERRY_GRAPH_NODE(n0), FERRY_GRAPH_CONST(&one, 8)}, 2);
 *     ferry_graph_compile(g, 10000);                 the last node bound is the output
 *     ferry_graph_execute(g, inputs, 1, &exec);      as often as wanted, pipelined
 *     ferry_graph_get(g, exec, 1000, &result);       ... ferry_graph_result_release(&result)
 *     ferry_graph_destroy(g);
 *
 * Only actor methods: a node runs on a worker the graph holds for its whole life, which an
 * actor is; a task would have to be scheduled per call, which is what a graph avoids (bind a
 * stateless function as a method of an actor instead). Values travel inline (up to 32 MiB),
 * never through the store. Each node runs executions in the order they were made.
 *
 * Failures: a method's error fails that execution only (get returns it, the text naming the
 * node, the method and where it ran); an actor of the graph ending (its worker died, it was
 * killed, its owner dropped it) breaks the graph: every execution in flight and every later
 * one fails with -EPIPE naming the node and method. A restarted actor does not rejoin a
 * graph: compile a new one.
 *
 * Thread model: a graph's calls are thread-safe; execute and get may run on different threads.
 * The graph uses blocking sockets of its own, from the caller's thread, not the runtime's loop.
 */
#define FERRY_GRAPH_MAX_NODES 256   /* nodes in one graph */
#define FERRY_GRAPH_MAX_ARGS 64	    /* arguments of one node */
#define FERRY_GRAPH_MAX_INFLIGHT 64 /* executions not yet gotten */

enum ferry_graph_arg_kind {
	FERRY_GRAPH_ARG_CONST = 0, /* @data, @len: copied at bind */
	FERRY_GRAPH_ARG_INPUT = 1, /* the execution's input number @index */
	FERRY_GRAPH_ARG_NODE = 2,  /* the result of node @index (bound earlier) */
};

struct ferry_graph_arg {
	enum ferry_graph_arg_kind kind;
	const void *data;
	size_t len;
	uint32_t index;
};

#define FERRY_GRAPH_CONST(p, n) \
	((struct ferry_graph_arg){.kind = FERRY_GRAPH_ARG_CONST, .data = (p), .len = (n)})
#define FERRY_GRAPH_INPUT(i) ((struct ferry_graph_arg){.kind = FERRY_GRAPH_ARG_INPUT, .index = (i)})
#define FERRY_GRAPH_NODE(i) ((struct ferry_graph_arg){.kind = FERRY_GRAPH_ARG_NODE, .index = (i)})

struct ferry_graph;

/* ferry_graph_create() - an empty graph. 0, -ENOMEM, -ENOTCONN (no ferry_init). */
FERRY_API int ferry_graph_create(struct ferry_graph **out);

/*
 * ferry_graph_bind() - add a node: @actor's @method ("Class.method") called with @args. Each
 * node needs at least one input or node argument (it runs when they come). The actor handle
 * is borrowed: keep it until the graph is destroyed. Returns the node's index (0, 1, ...), or
 * -EINVAL (a bad argument, a node not bound yet, FERRY_GRAPH_MAX_* reached, or the graph
 * compiled already), -ENOMEM.
 */
FERRY_API int ferry_graph_bind(struct ferry_graph *g, struct ferry_actor *actor, const char *method,
			       const struct ferry_graph_arg *args, size_t nargs);

/*
 * ferry_graph_compile() - make the graph executable; its output is the last node bound, and
 * every other node's result must be used. Waits up to @timeout_ms (< 0: forever) for its actors
 * to be ALIVE, then installs the plan in their workers. 0; -EINVAL (empty, an unused node, or
 * compiled already); -ESRCH (an actor is dead); -ENOENT (no such method on a worker); -ETIMEDOUT;
 * -ENOTCONN; -ENOMEM; the sockets' -errno. Each failure is logged with its reason. A graph
 * that failed to compile can only be destroyed.
 */
FERRY_API int ferry_graph_compile(struct ferry_graph *g, int64_t timeout_ms);

/*
 * ferry_graph_execute() - start one execution with @inputs[0..@ninputs) (@ninputs: one more
 * than the highest input index bound; copied before it returns); its ID into *@exec for
 * ferry_graph_get. 0; -EAGAIN (FERRY_GRAPH_MAX_INFLIGHT executions not gotten yet); -EINVAL
 * (not compiled, or a wrong @ninputs); -ENOMEM. A broken graph still returns 0: the
 * execution's get fails with the reason.
 */
FERRY_API int ferry_graph_execute(struct ferry_graph *g, const struct ferry_graph_arg *inputs,
				  size_t ninputs, uint64_t *exec);

/* An execution's result: @len bytes at @data (the runtime's, until released), or the error's
 * text in @error. */
struct ferry_graph_result {
	void *data;
	size_t len;
	char error[512];
};

/*
 * ferry_graph_get() - wait up to @timeout_ms (< 0: forever) for execution @exec's result.
 * 0 (release @out with ferry_graph_result_release); -ETIMEDOUT (the execution stays: get it
 * again); the execution's error (a method's -errno; -EPIPE: an actor of the graph ended), the
 * text in @out->error; -ENOENT (no such execution, or gotten already). Each execution is
 * gotten once.
 */
FERRY_API int ferry_graph_get(struct ferry_graph *g, uint64_t exec, int64_t timeout_ms,
			      struct ferry_graph_result *out);
FERRY_API void ferry_graph_result_release(struct ferry_graph_result *r);

/* ferry_graph_destroy() - free the graph here and on every worker (waiting up to 5 s for them
 * to confirm); executions not gotten are dropped. NULL is a no-op. */
FERRY_API void ferry_graph_destroy(struct ferry_graph *g);

/* ferry_graph_worker_graphs() - after compile: the most graphs any worker of @g held when @g
 * was installed (1 when no other graph shares its workers): lets a program check that
 * destroyed graphs left nothing behind. -EINVAL before compile. */
FERRY_API int ferry_graph_worker_graphs(const struct ferry_graph *g);

/*
 * Placement groups (Ray's): resources reserved on the cluster's nodes as a set of bundles, for
 * tasks and actors to run in (ferry_task_opts.pg, ferry_actor_opts.pg). The creating process
 * owns the group: it chooses a node per bundle by the strategy and reserves them with a
 * two-phase commit on those nodes (runtime/pg.c); the group is released when it is removed or
 * when its owner ends (even by a crash). A group that cannot be placed now (the cluster lacks
 * room, or can never hold it) stays PENDING, retried, with a warning for the infeasible.
 * Thread model: any thread; one group's handle is not to be removed while another thread
 * uses it.
 */
enum ferry_pg_strategy {
	FERRY_PG_PACK = 0,	   /* as few nodes as possible (the default) */
	FERRY_PG_SPREAD = 1,	   /* as many nodes as possible */
	FERRY_PG_STRICT_PACK = 2,  /* every bundle on one node, or pending */
	FERRY_PG_STRICT_SPREAD = 3 /* each bundle on its own node, or pending */
};

/* One bundle: amounts as in ferry_task_opts, but 0 is none (a bundle asks for something). */
struct ferry_pg_bundle {
	double num_cpus;       /* CPUs */
	double num_gpus;       /* GPUs */
	double memory_bytes;   /* memory */
	const char *resources; /* custom ones, "name=amount,..."; NULL: none */
};

/* The most bundles of one group. */
#define FERRY_PG_MAX_BUNDLES 1024

struct ferry_pg_opts {
	enum ferry_pg_strategy strategy;       /* see the enum */
	const struct ferry_pg_bundle *bundles; /* 1..FERRY_PG_MAX_BUNDLES of them */
	uint32_t nbundles;		       /* how many */
	const char *name;		       /* NULL: unnamed (recorded in the GCS) */
};

/*
 * ferry_pg_create() - record a group PENDING in the GCS and start placing it (in the
 * background: ferry_pg_wait waits for it). 0 and *@out; -EINVAL (no bundles, too many, a
 * bundle of nothing, a bad resource string or strategy); -ENOMEM; -ENOTCONN; -EOPNOTSUPP
 * (from a worker's task: groups are a driver's); the GCS's -errno.
 */
FERRY_API int ferry_pg_create(const struct ferry_pg_opts *opts, struct ferry_pg **out);
/* ferry_pg_wait() - wait up to @timeout_ms (< 0: forever) until the group is CREATED (every
 * bundle reserved; after a node holding some died, reserved again elsewhere). 0; -ETIMEDOUT (still pending); -ECANCELED (removed, or shut down). */
FERRY_API int ferry_pg_wait(struct ferry_pg *pg, int64_t timeout_ms);
/* ferry_pg_remove() - release every bundle (tasks running in one keep their resources until
 * they end), record the group REMOVED, and free @pg. 0, or the GCS's -errno (the handle is
 * freed all the same). NULL: no-op. */
FERRY_API int ferry_pg_remove(struct ferry_pg *pg);
/* ferry_pg_id() - the group's ID (its GCS record's key). */
FERRY_API const struct ferry_placement_group_id *ferry_pg_id(const struct ferry_pg *pg);

#ifdef __cplusplus
}
#endif

#endif
