/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The worker process (ferry-worker): its setup from the environment the node starts it with,
 * its run (worker.c), the job's code (worker_assign.c) and the tasks it runs (worker_task.c).
 * Split from worker_main.c so that tests and the fuzz target drive the same code.
 *
 * Thread model: a struct ferry__worker belongs to its loop's thread: every function here runs
 * on it (the task functions it calls may start threads of their own; ferry_task_* work from
 * any thread while the task runs).
 */
#ifndef FERRY_RUNTIME_WORKER_H
#define FERRY_RUNTIME_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

#include <ferry/id.h>
#include <ferry/plasma.h>
#include <ferry/runtime.h>

#include "common/conn.h"
#include "common/fb.h"
#include "common/loop.h"
#include "common/wire.h"

/* Largest worker secret (FERRY_WORKER_SECRET, hex) accepted, in bytes. */
#define FERRY__WORKER_SECRET_MAX 256
/* Caps on one PushTask beyond what the frame allows: returns and arguments per task. */
#define FERRY__WORKER_MAX_RETURNS 1024u
#define FERRY__WORKER_MAX_ARGS 4096u
/* inline_max 0 in a PushTask: the runtime's default (ferry_init_opts.inline_max). */
#define FERRY__WORKER_DEFAULT_INLINE_MAX (100u << 10)
/* Largest frame on a worker's socket (runtime.fbs: the receiver's frame cap), and the cap
 * before an owner's RuntimeConnect came (runtime.fbs: RuntimeConnect <= 8 KiB). */
#define FERRY__WORKER_FRAME_MAX (64u << 20)
#define FERRY__WORKER_CONNECT_MAX (8u << 10)

/* What the node gives a worker process (its environment). */
struct ferry__worker_opts {
	char runtime_socket[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* the node's */
	char store_socket[sizeof(((struct sockaddr_un *)0)->sun_path)];	  /* the node's store */
	struct ferry_worker_id id;					  /* this worker */
	uint8_t secret[FERRY__WORKER_SECRET_MAX];			  /* its secret */
	size_t secret_len;						  /* bytes in secret */
	/* Its TCP endpoint for owners on other hosts (FERRY_WORKER_IP, _TOKEN); "": none. */
	char ip[48];
	uint8_t token[256]; /* the cluster token they present */
	size_t token_len;   /* its bytes */
};

/*
 * ferry__worker_opts_from_env() - read FERRY_NODE_RUNTIME_SOCKET, FERRY_NODE_STORE_SOCKET,
 * FERRY_WORKER_ID (32 hex digits) and FERRY_WORKER_SECRET (hex) into @o, and the optional
 * FERRY_WORKER_IP and FERRY_WORKER_TOKEN (hex; both or neither) of its TCP endpoint. 0, or
 * -EINVAL with the reason in @err (naming the variable).
 */
int ferry__worker_opts_from_env(struct ferry__worker_opts *o, char *err, size_t err_size);

/*
 * ferry__worker_listen_path() - the socket a worker serves owners on: beside the node's runtime
 * socket, "<its directory>/w-<worker id hex>.sock". 0, or -ENAMETOOLONG (longer than a Unix
 * socket path may be).
 */
int ferry__worker_listen_path(const char *runtime_socket, const struct ferry_worker_id *id,
			      char *out, size_t size);

/*
 * ferry__worker_run() - the worker's life: serve its listen path, connect to the node, run
 * until the node's socket closes or SIGTERM/SIGINT (which the caller blocked, so that they
 * arrive through a signalfd). Returns the process's exit status: 0 after the node closed or a
 * signal, 1 when it could not start (the node refused it, no store, no socket), each logged.
 */
int ferry__worker_run(const struct ferry__worker_opts *o);

/* ---- the worker's state, for worker*.c, tests and the fuzz target ---- */

struct ferry__worker_actor;
struct ferry__worker_graph;

struct ferry__worker {
	struct ferry__loop *loop;	   /* the one loop: sockets and tasks */
	struct ferry__conn *node;	   /* the node's runtime socket; NULL once closed */
	struct ferry__conn_server *server; /* owners connect here */
	struct ferry_plasma_client *store; /* the node's store; NULL before (fuzz: never) */
	struct ferry__worker_actor *actor; /* the actor it hosts (worker_actor.c), or NULL */
	struct ferry__worker_graph *graph; /* its compiled graphs, a list (graph_worker.c) */
	struct ferry__fb_builder fb;	   /* replies are built here */
	struct ferry__loop_req sig_req;	   /* the signalfd's poll */
	int sig_fd;			   /* SIGTERM/SIGINT; -1: none */
	struct ferry_worker_id id;	   /* this worker */
	struct ferry_node_id node_id;	   /* from RuntimeConnectReply */
	char id_hex[FERRY_ID_HEX_MAX];	   /* for messages */
	char node_hex[FERRY_ID_HEX_MAX];   /* "unknown" before the node said */
	char listen_path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* owners' socket */
	const struct ferry__worker_opts *opts;			       /* what it started with */
	bool registered; /* the node accepted RuntimeConnect */
	bool stopping;	 /* the loop is stopping: exit */
	int exit_code;	 /* ferry__worker_run()'s result */
	/* The job (WorkerAssign): a worker serves one in its life. */
	bool assigned;		  /* a WorkerAssign was handled (status says how) */
	int assign_status;	  /* its result: 0 or -errno */
	struct ferry_job_id job;  /* its job */
	char assign_message[512]; /* its message ("" when status is 0) */
	uint64_t tasks_run;	  /* PushTasks answered */
	/* Owners on other hosts connect here (runtime/dial.h); NULL: none. */
	struct ferry__conn_server *tcp_server;
};

/* ferry__worker_init() / _fini() - the parts of a worker that tests and the fuzz target use
 * without sockets: IDs, names, the builder. */
void ferry__worker_init(struct ferry__worker *w, const struct ferry_worker_id *id);
/* ferry__worker_owner_send() - a message to the owner on @conn (a connection of the worker's
 * socket): on its ring when it has one (runtime/ring.h keeps the two paths in order), else on
 * the socket. Loop thread. 0 or -errno. */
struct ferry__conn;
int ferry__worker_owner_send(struct ferry__conn *conn, uint16_t type, const void *payload,
			     size_t len);
void ferry__worker_fini(struct ferry__worker *w);

/*
 * ferry__worker_check_connect() - is @payload (a verified RuntimeConnect) an owner's that this
 * worker accepts (protocol version, kind Driver or Worker)? 0, or -EPROTO with the reason in
 * @why (for the log line that goes with closing the socket).
 */
int ferry__worker_check_connect(const void *payload, size_t len, char *why, size_t why_size);

/*
 * ferry__worker_assign() - handle WorkerAssign @payload (verified): load the job's library,
 * check its hash, run its worker setup once; build the WorkerAssignReply into @w->fb. 0 (a
 * reply is built, whatever its status), or -ENOMEM (nothing built).
 */
int ferry__worker_assign(struct ferry__worker *w, const void *payload, size_t len);

/*
 * ferry__worker_push_task() - run PushTask @payload (verified) and build its PushTaskReply
 * into @w->fb: the returns, or the function's error, or the reason a malformed task was not
 * run. 0 (a reply is built), or -ENOMEM (nothing built). Blocks while ref arguments are not
 * in the store yet.
 */
int ferry__worker_push_task(struct ferry__worker *w, const void *payload, size_t len);

/*
 * ferry__worker_run_task() - ferry__worker_push_task() of a decoded PushTask @v, calling @fn
 * (NULL: the function its name finds); the task's status into *@result (actors: whether the
 * constructor succeeded). ferry__worker_of_task() - the worker running @ctx, or NULL.
 */
int ferry__worker_run_task(struct ferry__worker *w, struct ferry__wire_push_task_view v,
			   ferry_task_fn fn, int *result);
struct ferry__worker *ferry__worker_of_task(const struct ferry_task_ctx *ctx);

/*
 * ferry__worker_actor_message() - (worker_actor.c) handle ActorCreate, ActorCall or ActorKill
 * @payload (verified, of @type) from the socket @conn and build its reply into @w->fb, its
 * type into *@reply_type. 0 (a reply is built), 1 (a concurrent call queued: its reply is
 * sent on @conn when it ends), or -ENOMEM. ferry__worker_actor_is_message() -
 * whether @type is one. ferry__worker_actor_conn_closed() - @conn closed: an actor it created
 * goes (its owner is gone). ferry__worker_actor_fini() - the worker exits: the destructor runs.
 */
int ferry__worker_actor_message(struct ferry__worker *w, struct ferry__conn *conn, uint16_t type,
				const void *payload, size_t len, uint16_t *reply_type);
bool ferry__worker_actor_is_message(uint16_t type);
void ferry__worker_actor_conn_closed(struct ferry__worker *w, const struct ferry__conn *conn);
void ferry__worker_actor_fini(struct ferry__worker *w);

/* ferry__worker_actor_current() - (worker_actor.c) whether @w hosts an actor; its ID and
 * class into *@id and *@cls (valid while it lives). */
bool ferry__worker_actor_current(const struct ferry__worker *w, struct ferry_actor_id *id,
				 const char **cls);

/*
 * Compiled graphs (graph_worker.c; runtime.fbs's GraphInstall, GraphData, GraphDestroy).
 * ferry__worker_graph_message() - handle one of them (@payload verified, of @type) from socket
 * @conn (NULL in the fuzz target: nothing is sent); replies are sent on @conn, values along the
 * graph's edges. 0, or -errno for a message that breaks the protocol (the caller closes @conn).
 * ferry__worker_graph_conn_closed() - @conn closed: the graphs it installed go.
 * ferry__worker_graph_actor_gone() - the actor ended: every graph goes and its driver's socket
 * closes. ferry__worker_graph_fini() - the worker exits (its sockets are gone already).
 */
bool ferry__worker_graph_is_message(uint16_t type);
int ferry__worker_graph_message(struct ferry__worker *w, struct ferry__conn *conn, uint16_t type,
				const void *payload, size_t len);
void ferry__worker_graph_conn_closed(struct ferry__worker *w, const struct ferry__conn *conn);
void ferry__worker_graph_actor_gone(struct ferry__worker *w);
void ferry__worker_graph_fini(struct ferry__worker *w);

/* An argument's bytes for ferry__worker_call(). */
struct ferry__worker_buf {
	const void *data; /* NULL for none */
	size_t len;	  /* bytes */
};

/*
 * ferry__worker_call() - (worker_task.c) call @fn as a task of @nargs inline @args and one
 * return, outside any PushTask (a compiled graph's node). Returns the function's status; on
 * 0, *@out is its return (ferry__malloc'd, NULL for zero bytes; the caller frees it) and
 * *@out_len its size; on -errno, @msg says why (the function's ferry_task_error, or the
 * worker's reason).
 */
int ferry__worker_call(struct ferry__worker *w, ferry_task_fn fn,
		       const struct ferry__worker_buf *args, size_t nargs, void **out,
		       size_t *out_len, char *msg, size_t msg_size);

/*
 * ferry__worker_error_reply() - build a PushTaskReply of @status and @message for task
 * @task_id (the reply that replaces one too large to send). 0 or -ENOMEM.
 */
int ferry__worker_error_reply(struct ferry__worker *w, const struct ferry__wire_unique_id *task_id,
			      int status, const char *message);

/* ferry__worker_setup_find() - the registered worker setup function and its name (NULL when
 * none), or -EEXIST when two were registered (@name then names both). */
int ferry__worker_setup_find(ferry_setup_fn *fn, char *name, size_t name_size);

/* ferry__worker_setup_message() - what the setup function said with ferry_task_error(NULL),
 * and clear it. "" if nothing. */
void ferry__worker_setup_message(char *out, size_t size);

/* ferry__worker_task_running() - whether a task's function runs in this process now (its
 * gets and waits then lend the worker's CPU to its node: runtime/worker_owner.c). */
bool ferry__worker_task_running(void);

/* ferry__worker_task_thread() - the calling thread runs tasks beside the loop thread (an
 * actor's concurrent calls, worker_actor.c): its running task in slot @slot (1 ..
 * FERRY__WORKER_TASK_SLOTS - 1, one thread each), its replies built into @fb. */
#define FERRY__WORKER_TASK_SLOTS (FERRY_ACTOR_MAX_CONCURRENCY + 1)
void ferry__worker_task_thread(unsigned slot, struct ferry__fb_builder *fb);

/* ferry__worker_owner_start() / _stop() - the runtime that lets @w's tasks submit tasks,
 * put and get (runtime/worker_owner.c): started once the job's library (@code_path, its
 * SHA-256 @code_hash) is loaded, stopped when the worker ends. 0 or -errno (logged). */
int ferry__worker_owner_start(struct ferry__worker *w, const char *code_path,
			      const uint8_t *code_hash);
void ferry__worker_owner_stop(void);
/* Whether @ref's object is not in @w's store but its owner, another process, serves an owner
 * socket on this host (a task's ref argument is then asked of it, with ferry_get). */
bool ferry__worker_owner_serves(struct ferry__worker *w, const struct ferry_ref *ref);

/*
 * A task that waits must not hold back the tasks pushed behind it (issue 23; runtime.fbs:
 * WorkerBlocked, TasksRecalled). The loop thread runs a socket's tasks in order and cannot
 * read while a task's function waits; the waits of a PushTask are numbered when the node is
 * told (worker_owner.c), the owner takes back what it pushed behind that task, and from the
 * task's end the socket's PushTasks are bounced until its owner's TasksRecalled of that wait.
 * Actor calls are never bounced: a caller's calls run in order, and a method that waits holds
 * its actor's queue, as Ray's do.
 *
 * ferry__worker_push_or_bounce() - PushTask @payload (verified) from socket @conn (NULL: none,
 * the fuzz target) of bounce state @b: a PushTaskReply that says bounced, or the task run
 * (ferry__worker_push_task(); if it waits, the replies queued on @conn are sent first).
 * ferry__worker_tasks_recalled() - TasksRecalled @payload (verified) for @b. Loop thread.
 */
struct ferry__worker_bounce {
	uint64_t waited;   /* the last wait numbered in a task of this socket */
	uint64_t recalled; /* the last wait its owner recalled */
};
int ferry__worker_push_or_bounce(struct ferry__worker *w, struct ferry__worker_bounce *b,
				 struct ferry__conn *conn, const void *payload, size_t len);
void ferry__worker_tasks_recalled(struct ferry__worker_bounce *b, const void *payload);
/* ferry__worker_bounce_reply() - (worker_task.c) build the bounced PushTaskReply of PushTask
 * @payload (verified) for wait @wait_id. 0 or -ENOMEM. */
int ferry__worker_bounce_reply(struct ferry__worker *w, const void *payload, uint64_t wait_id);

/* ferry__worker_setup_reset() - forget the setup function (tests: one process per test). */
void ferry__worker_setup_reset(void);

#endif
