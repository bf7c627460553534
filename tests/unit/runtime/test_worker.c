/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The real ferry-worker process, driven as its node and its owners drive it: this test serves
 * a runtime socket and starts the worker with the node's environment (a plasma store runs in a
 * child process), answers its RuntimeConnect, sends WorkerAssign with a test job's library
 * (job_lib.c, job_badsetup.c, job_dup.c), then connects to the worker's socket as an owner and
 * pushes tasks. Checked: returns inline and in the store (owned by the caller), errors with
 * their messages, unknown functions, libraries that fail to load, malformed messages, and that
 * the worker exits (removing its socket) when its node goes or on SIGTERM. A retried task whose
 * return an earlier attempt sealed succeeds; a ref argument that never appears fails the task
 * with -ETIMEDOUT ($FERRY_ARG_TIMEOUT_MS) instead of hanging the worker. A task that waits
 * has the PushTasks behind it bounced until its owner's TasksRecalled (issue 23).
 */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ferry/plasma.h>

#include "common/alloc.h"
#include "common/conn.h"
#include "common/sha256.h"
#include "common/wire.h"
#include "ftest.h"
#include "ftest_loop.h"
#include "../plasma/client_test.h"

#define KIB (1u << 10)
#define MIB (1u << 20)

struct sim {
	struct ferry__loop *loop;	/* the test's: node side and owner side */
	struct ferry__conn_server *rt;	/* the node's runtime socket */
	struct ferry__conn *node_side;	/* the worker's connection to it */
	struct ferry__conn *owner;	/* the owner's connection to the worker */
	struct ferry__fb_builder fb;	/* messages */
	struct test_store store;	/* the store (a child) */
	pid_t worker_pid;		/* the worker */
	char rt_path[108];		/* the node's runtime socket */
	struct ferry_worker_id wid;	/* the worker's ID */
	struct ferry_node_id nid;	/* the node's */
	struct ferry_job_id job;	/* the job */
	struct ferry_worker_id caller;	/* the owner's ID */
	uint8_t secret[16];		/* the worker's secret */
	int refuse;			/* RuntimeConnectReply status */
	bool got_connect;		/* the worker's RuntimeConnect came */
	bool connect_ok;		/* with its ID, secret, pid and kind */
	char listen_path[108];		/* what it said it serves */
	bool node_side_closed;		/* its connection closed */
	int assign_replies;		/* WorkerAssignReply count */
	int assign_status;		/* the last one's */
	char assign_message[1024];	/* the last one's */
	bool owner_closed;		/* the owner's connection closed */
	int replies;			/* PushTaskReply count */
	bool stop_on_reply;		/* a push waits: stop the loop at its reply */
	uint8_t *reply;			/* the last one's payload (copy) */
	struct ferry__conn *owner_line; /* the worker's runtime as an owner (its 2nd connection) */
	uint64_t blocked_wait;		/* the last WorkerBlocked's wait_id (blocked true) */
	struct ferry_task_id blocked_task; /* and its task */
};

static struct sim S;

/* ---- the store (a child process) ---- */

static void store_start(void)
{
	store_spawn(&S.store, (struct ferry__plasma_server_opts){.memory_bytes = 64 * MIB});
}

/* ---- the node's side ---- */

static void send_built(struct ferry__conn *c, uint16_t type)
{
	ftest_assert_ok(ferry__conn_send(c, type, ferry__fb_builder_data(&S.fb),
					 ferry__fb_builder_size(&S.fb)));
}

static void on_worker_connect(const void *payload)
{
	struct ferry__wire_runtime_connect_view v =
		ferry__wire_runtime_connect_root_verified(payload);
	struct ferry__wire_unique_id id = ferry__wire_runtime_connect_id(v);
	struct ferry__wire_runtime_connect_reply m = {.status = S.refuse,
						      .store_socket = S.store.path};
	const char *lp = ferry__wire_runtime_connect_listen_path(v);

	S.got_connect = true;
	S.connect_ok =
		ferry__wire_runtime_connect_kind(v) == FERRY__WIRE_PEER_KIND_WORKER &&
		ferry__wire_runtime_connect_protocol_version(v) == FERRY_WIRE_PROTOCOL_VERSION &&
		!memcmp(id.bytes, S.wid.bytes, 16) &&
		ferry__wire_runtime_connect_secret_count(v) == sizeof(S.secret) &&
		!memcmp(ferry__wire_runtime_connect_secret_data(v), S.secret, sizeof(S.secret)) &&
		ferry__wire_runtime_connect_pid(v) == S.worker_pid;
	snprintf(S.listen_path, sizeof(S.listen_path), "%s", lp ? lp : "");
	if (S.refuse)
		m.message = "not one of mine";
	memcpy(m.node_id.bytes, S.nid.bytes, 16);
	ftest_assert_ok(ferry__wire_runtime_connect_reply_build(&S.fb, &m));
	send_built(S.node_side, FERRY__WIRE_MSG_RUNTIME_CONNECT_REPLY);
}

static void on_node_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			    size_t len)
{
	struct ferry__wire_worker_assign_reply_view v;
	const char *msg;

	(void)conn;
	(void)len;
	if (type == FERRY__WIRE_MSG_RUNTIME_CONNECT) {
		on_worker_connect(payload);
		return;
	}
	ftest_assert_int_eq(type, FERRY__WIRE_MSG_WORKER_ASSIGN_REPLY);
	v = ferry__wire_worker_assign_reply_root_verified(payload);
	S.assign_status = ferry__wire_worker_assign_reply_status(v);
	msg = ferry__wire_worker_assign_reply_message(v);
	snprintf(S.assign_message, sizeof(S.assign_message), "%s", msg ? msg : "");
	S.assign_replies++;
}

static void on_node_close(struct ferry__conn *conn, int err)
{
	(void)conn;
	(void)err;
	S.node_side = NULL;
	S.node_side_closed = true;
}

static const struct ferry__conn_callbacks node_cb = {.on_message = on_node_message,
						     .on_close = on_node_close};

/* The worker's owner line: what its tasks' waits tell the node. */
static void on_line_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			    size_t len)
{
	struct ferry__wire_worker_blocked_view v;
	struct ferry__wire_unique_id tid;

	(void)conn;
	(void)len;
	if (type != FERRY__WIRE_MSG_WORKER_BLOCKED)
		return; /* its RuntimeConnect: it needs no answer to send */
	v = ferry__wire_worker_blocked_root_verified(payload);
	if (!ferry__wire_worker_blocked_blocked(v))
		return;
	tid = ferry__wire_worker_blocked_task_id(v);
	memcpy(S.blocked_task.bytes, tid.bytes, 16);
	S.blocked_wait = ferry__wire_worker_blocked_wait_id(v);
}

static void on_line_close(struct ferry__conn *conn, int err)
{
	(void)conn;
	(void)err;
	S.owner_line = NULL;
}

static const struct ferry__conn_callbacks line_cb = {.on_message = on_line_message,
						     .on_close = on_line_close};

static void on_rt_accept(struct ferry__conn_server *srv, struct ferry__conn *conn, const void *hs,
			 size_t len)
{
	(void)srv;
	(void)hs;
	(void)len;
	if (S.node_side) { /* its tasks wait or submit: the worker's runtime joins */
		ftest_assert_ptr_null(S.owner_line);
		S.owner_line = conn;
		ferry__conn_set_callbacks(conn, &line_cb, NULL);
		return;
	}
	S.node_side = conn;
}

/* ---- the worker process ---- */

static const char *need_env(const char *name)
{
	const char *v = getenv(name);

	if (!v || !v[0])
		ftest_skip("%s is not set (run through meson test)", name);
	return v;
}

static pid_t spawn_worker(bool with_id, int err_fd)
{
	const char *exe = need_env("FERRY_WORKER_EXE");
	char id[FERRY_ID_HEX_MAX], secret[2 * sizeof(S.secret) + 1];
	pid_t pid;

	ferry_worker_id_to_hex(&S.wid, id, sizeof(id));
	ferry_id_to_hex(S.secret, sizeof(S.secret), secret, sizeof(secret));
	pid = fork();
	ftest_assert_int_ge(pid, 0);
	if (pid == 0) {
		setenv("FERRY_NODE_RUNTIME_SOCKET", S.rt_path, 1);
		setenv("FERRY_NODE_STORE_SOCKET", S.store.path, 1);
		if (with_id)
			setenv("FERRY_WORKER_ID", id, 1);
		else
			unsetenv("FERRY_WORKER_ID");
		setenv("FERRY_WORKER_SECRET", secret, 1);
		if (err_fd >= 0)
			dup2(err_fd, 2);
		execl(exe, "ferry-worker", (char *)NULL);
		_exit(127);
	}
	return pid;
}

static bool got_connect(void *arg)
{
	(void)arg;
	return S.got_connect;
}

static bool node_side_closed(void *arg)
{
	(void)arg;
	return S.node_side_closed;
}

/* A store, a node socket and a worker registered with it (not assigned a job yet). */
static void sim_start(int refuse)
{
	struct ferry__conn_server_opts so = {.conn = {.cb = &node_cb},
					     .on_accept = on_rt_accept,
					     .flags = FERRY_CONN_SERVER_NO_HANDSHAKE};

	need_env("FERRY_WORKER_EXE");
	S.refuse = refuse;
	ferry_worker_id_random(&S.wid);
	ferry_node_id_random(&S.nid);
	ferry_job_id_random(&S.job);
	ferry_worker_id_random(&S.caller);
	ferry_id_random(S.secret, sizeof(S.secret));
	store_start();
	/* Beside the store, as a node's: the worker's runtime finds it there for its owner line. */
	ftest_assert_true(strlen(S.store.path) + 4 <= sizeof(S.rt_path));
	memcpy(S.rt_path, S.store.path, strlen(S.store.path));
	memcpy(S.rt_path + strlen(S.store.path), ".rt", 4);
	ftest_assert_ok(ferry__loop_create(NULL, &S.loop));
	ftest_assert_ok(ferry__conn_server_listen_unix(S.loop, S.rt_path, &so, &S.rt));
	S.worker_pid = spawn_worker(true, -1);
	run_until(S.loop, got_connect, NULL);
	ftest_assert_true(S.connect_ok);
}

/* Wait for the worker to exit; its wait status. */
static int worker_wait(void)
{
	int status = 0;

	ftest_assert_int_eq(waitpid(S.worker_pid, &status, 0), S.worker_pid);
	S.worker_pid = 0;
	return status;
}

static void sim_stop(void)
{
	if (S.worker_pid) {
		kill(S.worker_pid, SIGKILL);
		worker_wait();
	}
	ferry__loop_destroy(S.loop);
	ferry__fb_builder_fini(&S.fb);
	ferry__free(S.reply);
	store_stop(&S.store);
}

/* ---- WorkerAssign ---- */

static bool assign_answered(void *arg)
{
	return S.assign_replies > *(int *)arg;
}

/* Send WorkerAssign for @path (its hash, or @bad_hash's bytes) and wait for the reply;
 * returns its status. */
static int assign(const char *path, const struct ferry_job_id *job, bool bad_hash)
{
	struct ferry__wire_worker_assign m = {.code_path = path};
	uint8_t hash[FERRY_SHA256_SIZE] = {0};
	int fd = open(path, O_RDONLY), before = S.assign_replies;

	if (fd >= 0) {
		ftest_assert_ok(ferry__sha256_fd(fd, hash));
		close(fd);
	}
	if (bad_hash)
		hash[0] ^= 1;
	m.code_hash = hash;
	m.code_hash_count = sizeof(hash);
	memcpy(m.job.bytes, job->bytes, 16);
	ftest_assert_ok(ferry__wire_worker_assign_build(&S.fb, &m));
	send_built(S.node_side, FERRY__WIRE_MSG_WORKER_ASSIGN);
	run_until(S.loop, assign_answered, &before);
	return S.assign_status;
}

/* ---- the owner ---- */

static void on_owner_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			     size_t len)
{
	(void)conn;
	ftest_assert_int_eq(type, FERRY__WIRE_MSG_PUSH_TASK_REPLY);
	ferry__free(S.reply);
	S.reply = ferry__malloc(len);
	ftest_assert_ptr_notnull(S.reply);
	memcpy(S.reply, payload, len);
	S.replies++;
	if (S.stop_on_reply)
		ferry__loop_stop(S.loop);
}

static void on_owner_close(struct ferry__conn *conn, int err)
{
	(void)conn;
	(void)err;
	S.owner = NULL;
	S.owner_closed = true;
	if (S.stop_on_reply)
		ferry__loop_stop(S.loop);
}

static const struct ferry__conn_callbacks owner_cb = {.on_message = on_owner_message,
						      .on_close = on_owner_close};

/* Connect to the worker as an owner; @version: the RuntimeConnect's (0: none sent). */
static void owner_connect(uint32_t version)
{
	struct ferry__conn_opts co = {.cb = &owner_cb, .max_message_bytes = 64 * MIB};
	struct ferry__wire_runtime_connect m = {.protocol_version = version,
						.kind = FERRY__WIRE_PEER_KIND_DRIVER,
						.pid = (int32_t)getpid()};

	S.owner_closed = false;
	memcpy(m.id.bytes, S.caller.bytes, 16);
	ftest_assert_ok(ferry__conn_connect_unix(S.loop, S.listen_path, &co, &S.owner));
	if (version) {
		ftest_assert_ok(ferry__wire_runtime_connect_build(&S.fb, &m));
		send_built(S.owner, FERRY__WIRE_MSG_RUNTIME_CONNECT);
	}
}

static bool replied_or_closed(void *arg)
{
	return S.replies > *(int *)arg || S.owner_closed;
}

struct task {
	const char *fn;			     /* function name */
	struct ferry__wire_task_arg args[4]; /* arguments */
	size_t nargs;			     /* their count */
	uint32_t num_returns;		     /* 0: 1 */
	uint64_t inline_max;		     /* 0: 100 KiB */
	struct ferry_task_id id;	     /* set by push */
	bool nil_id;			     /* send it without a task ID */
	bool given_id;			     /* send it with id as set */
};

/* Send @t's PushTask; no wait. */
static void push_send(struct task *t)
{
	struct ferry__wire_push_task m = {.function = t->fn,
					  .args = t->args,
					  .args_count = t->nargs,
					  .num_returns = t->num_returns ? t->num_returns : 1,
					  .inline_max = t->inline_max ? t->inline_max : 100 * KIB};

	if (!t->nil_id && !t->given_id)
		ferry_task_id_random(&t->id);
	memcpy(m.task_id.bytes, t->id.bytes, 16);
	memcpy(m.job.bytes, S.job.bytes, 16);
	memcpy(m.caller.bytes, S.caller.bytes, 16);
	ftest_assert_ok(ferry__wire_push_task_build(&S.fb, &m));
	send_built(S.owner, FERRY__WIRE_MSG_PUSH_TASK);
}

/* Run until @n replies came in all (true) or the socket closed (false). */
static bool wait_replies(int n)
{
	int before = n - 1;

	/* Stopped by the reply (or the close) itself: a polling wait would add its period. */
	S.stop_on_reply = true;
	while (!replied_or_closed(&before))
		ftest_assert_ok(ferry__loop_run(S.loop));
	S.stop_on_reply = false;
	return S.replies > before;
}

/* Push @t and wait for its reply (true) or the socket's close (false). */
static bool push(struct task *t)
{
	int before = S.replies;

	push_send(t);
	return wait_replies(before + 1);
}

static struct ferry__wire_push_task_reply_view reply(const struct task *t)
{
	struct ferry__wire_push_task_reply_view v =
		ferry__wire_push_task_reply_root_verified(S.reply);
	struct ferry__wire_unique_id tid = ferry__wire_push_task_reply_task_id(v);
	struct ferry__wire_unique_id nid = ferry__wire_push_task_reply_node_id(v);

	ftest_assert_mem_eq(tid.bytes, t->id.bytes, 16);
	ftest_assert_mem_eq(nid.bytes, S.nid.bytes, 16);
	return v;
}

static const char *reply_message(struct ferry__wire_push_task_reply_view v)
{
	const char *m = ferry__wire_push_task_reply_message(v);

	return m ? m : "";
}

static struct ferry__wire_task_arg inline_arg(const void *data, size_t len)
{
	struct ferry__wire_task_arg a = {.data = data, .data_count = len};

	return a;
}

/* A worker with the test job loaded and an owner connected. */
static void sim_ready(void)
{
	sim_start(0);
	ftest_assert_int_eq(assign(need_env("FERRY_TEST_JOB"), &S.job, false), 0);
	owner_connect(FERRY_WIRE_PROTOCOL_VERSION);
}

static bool str_has(const char *s, const char *part);

/* ---- tests ---- */

static bool blocked_seen(void *arg)
{
	(void)arg;
	return S.blocked_wait != 0;
}

/* A task that waits (in ferry_wait, 300 ms) with a task pushed behind it: the worker tells its
 * node of the wait on its owner line, naming the task and numbering the wait, and bounces the
 * task behind (not run) until its owner's TasksRecalled of that wait; pushed again, it runs.
 * A TasksRecalled of a wait that did not happen is ignored. */
FTEST(a_task_behind_a_waiting_task_bounces_until_recalled)
{
	int64_t ms = 300, a = 2, b = 3, got = -1;
	const uint8_t *data;
	struct task waits = {.fn = "wait_foreign", .nargs = 1}, behind = {.fn = "add", .nargs = 2};
	struct ferry__wire_push_task_reply_view v;
	uint64_t wait_id;
	int before;

	sim_ready();
	waits.args[0] = inline_arg(&ms, sizeof(ms));
	behind.args[0] = inline_arg(&a, sizeof(a));
	behind.args[1] = inline_arg(&b, sizeof(b));
	before = S.replies;
	push_send(&waits);
	push_send(&behind);
	ftest_assert_true(wait_replies(before + 2));
	run_until(S.loop, blocked_seen, NULL);
	ftest_assert_mem_eq(S.blocked_task.bytes, waits.id.bytes, 16);
	wait_id = S.blocked_wait;
	v = reply(&behind); /* the last reply: the one behind */
	ftest_assert_uint_eq(ferry__wire_push_task_reply_bounced_wait(v), wait_id);
	ftest_assert_uint_eq(ferry__wire_push_task_reply_returns_count(v), 0);
	/* Still bounced: its owner has not recalled that wait. */
	ftest_assert_true(push(&behind));
	ftest_assert_uint_eq(ferry__wire_push_task_reply_bounced_wait(reply(&behind)), wait_id);
	ftest_assert_ok(ferry__wire_tasks_recalled_build(
		&S.fb, &(struct ferry__wire_tasks_recalled){.wait_id = wait_id}));
	send_built(S.owner, FERRY__WIRE_MSG_TASKS_RECALLED);
	ftest_assert_true(push(&behind));
	v = reply(&behind);
	ftest_assert_uint_eq(ferry__wire_push_task_reply_bounced_wait(v), 0);
	ftest_assert_int_eq(ferry__wire_push_task_reply_status(v), 0);
	ftest_assert_uint_eq(ferry__wire_push_task_reply_returns_count(v), 1);
	data = ferry__wire_task_return_data_data(ferry__wire_push_task_reply_returns_at(v, 0));
	ftest_assert_ptr_notnull(data);
	memcpy(&got, data, sizeof(got));
	ftest_assert_int_eq(got, 5);
	/* A recall of a wait its tasks never had is ignored: the next wait still bounces. */
	ftest_assert_ok(ferry__wire_tasks_recalled_build(
		&S.fb, &(struct ferry__wire_tasks_recalled){.wait_id = wait_id + 1}));
	send_built(S.owner, FERRY__WIRE_MSG_TASKS_RECALLED);
	before = S.replies;
	push_send(&waits);
	push_send(&behind);
	ftest_assert_true(wait_replies(before + 2));
	ftest_assert_uint_eq(ferry__wire_push_task_reply_bounced_wait(reply(&behind)), wait_id + 1);
	sim_stop();
}

FTEST(add_returns_5)
{
	int64_t a = 2, b = 3, sum = 0;
	const uint8_t *data;
	struct task t = {.fn = "add", .nargs = 2};
	struct ferry__wire_push_task_reply_view v;
	struct ferry__wire_task_return_view r;

	sim_ready();
	t.args[0] = inline_arg(&a, sizeof(a));
	t.args[1] = inline_arg(&b, sizeof(b));
	ftest_assert_true(push(&t));
	v = reply(&t);
	ftest_assert_int_eq(ferry__wire_push_task_reply_status(v), 0);
	ftest_assert_uint_eq(ferry__wire_push_task_reply_returns_count(v), 1);
	r = ferry__wire_push_task_reply_returns_at(v, 0);
	ftest_assert_false(ferry__wire_task_return_in_store(r));
	ftest_assert_uint_eq(ferry__wire_task_return_data_count(r), sizeof(sum));
	data = ferry__wire_task_return_data_data(r);
	ftest_assert_ptr_notnull(data);
	memcpy(&sum, data, sizeof(sum));
	ftest_assert_int_eq(sum, 5);
	sim_stop();
}

/* Check that object @id is in the store with @data's @len bytes, owned by the caller. */
static void check_in_store(const struct ferry_object_id *id, const void *data, size_t len)
{
	struct ferry_plasma_client *c = NULL;
	struct ferry_plasma_object_info *objs = NULL;
	struct ferry_plasma_view view;
	size_t n = 0, found = 0;

	ftest_assert_ok(ferry_plasma_client_connect(S.store.path, NULL, &c));
	ftest_assert_ok(ferry_plasma_client_get(c, id, 1, 0, &view));
	ftest_assert_uint_eq(view.data_size, len);
	ftest_assert_true(memcmp(view.data, data, len) == 0);
	ftest_assert_ok(ferry_plasma_client_release(c, &view));
	ftest_assert_ok(ferry_plasma_client_list(c, false, &objs, &n));
	for (size_t i = 0; i < n; i++) {
		if (memcmp(objs[i].id.bytes, id->bytes, sizeof(id->bytes)) != 0)
			continue;
		found++;
		ftest_assert_mem_eq(objs[i].owner.bytes, S.caller.bytes, 16);
	}
	ftest_assert_uint_eq(found, 1);
	ferry_plasma_list_free(objs);
	ferry_plasma_client_disconnect(c);
}

FTEST(echo_1mib_goes_to_the_store_owned_by_the_caller)
{
	size_t len = MIB;
	uint8_t *data = malloc(len);
	struct task t = {.fn = "echo", .nargs = 1, .inline_max = 100 * KIB};
	struct ferry__wire_push_task_reply_view v;
	struct ferry__wire_task_return_view r;
	struct ferry_object_id oid;

	ftest_assert_ptr_notnull(data);
	for (size_t i = 0; i < len; i++)
		data[i] = (uint8_t)(i * 13 + 1);
	sim_ready();
	t.args[0] = inline_arg(data, len);
	ftest_assert_true(push(&t));
	v = reply(&t);
	ftest_assert_int_eq(ferry__wire_push_task_reply_status(v), 0);
	r = ferry__wire_push_task_reply_returns_at(v, 0);
	ftest_assert_true(ferry__wire_task_return_in_store(r));
	ftest_assert_uint_eq(ferry__wire_task_return_size(r), len);
	ftest_assert_uint_eq(ferry__wire_task_return_data_count(r), 0);
	ferry_object_id_for_task(&t.id, 1, &oid);
	check_in_store(&oid, data, len);
	free(data);
	sim_stop();
}

/* big writes in place (ferry_task_return_alloc): in the store above inline_max, inline below. */
FTEST(big_writes_in_place_inline_or_in_the_store)
{
	uint64_t sizes[2] = {300 * KIB, 10};
	struct ferry__wire_push_task_reply_view v;
	struct ferry__wire_task_return_view r;
	struct ferry_object_id oid;
	uint8_t *want = malloc(300 * KIB);

	ftest_assert_ptr_notnull(want);
	for (size_t i = 0; i < 300 * KIB; i++)
		want[i] = (uint8_t)(i * 31 + 7);
	sim_ready();
	for (int k = 0; k < 2; k++) {
		struct task t = {.fn = "big", .nargs = 1};

		t.args[0] = inline_arg(&sizes[k], sizeof(sizes[k]));
		ftest_assert_true(push(&t));
		v = reply(&t);
		ftest_assert_int_eq(ferry__wire_push_task_reply_status(v), 0);
		r = ferry__wire_push_task_reply_returns_at(v, 0);
		ftest_assert_int_eq(ferry__wire_task_return_in_store(r), k == 0);
		if (k == 0) {
			ferry_object_id_for_task(&t.id, 1, &oid);
			check_in_store(&oid, want, sizes[k]);
		} else {
			ftest_assert_uint_eq(ferry__wire_task_return_data_count(r), sizes[k]);
			ftest_assert_mem_eq(ferry__wire_task_return_data_data(r), want, sizes[k]);
		}
	}
	free(want);
	sim_stop();
}

/* A retry of a task whose earlier attempt sealed its return in the store before its worker
 * died: the create finds the object (-EEXIST), and the task succeeds with the sealed value. */
FTEST(retry_of_a_task_whose_return_is_sealed_succeeds)
{
	uint64_t size = 300 * KIB;
	struct task t = {.fn = "big", .nargs = 1, .given_id = true};
	struct ferry__wire_push_task_reply_view v;
	struct ferry__wire_task_return_view r;
	struct ferry_plasma_client *c = NULL;
	struct ferry_object_id oid;
	uint8_t *want = malloc(size);

	ftest_assert_ptr_notnull(want);
	for (size_t i = 0; i < size; i++)
		want[i] = (uint8_t)(i * 31 + 7);
	sim_ready();
	ferry_task_id_random(&t.id);
	ferry_object_id_for_task(&t.id, 1, &oid);
	ftest_assert_ok(ferry_plasma_client_connect(S.store.path, NULL, &c));
	ftest_assert_ok(ferry_plasma_client_put_owned(c, &oid, want, size, NULL, 0, 0, &S.caller));
	ferry_plasma_client_disconnect(c);
	t.args[0] = inline_arg(&size, sizeof(size));
	ftest_assert_true(push(&t));
	v = reply(&t);
	ftest_log("status %d: %s", ferry__wire_push_task_reply_status(v), reply_message(v));
	ftest_assert_int_eq(ferry__wire_push_task_reply_status(v), 0);
	r = ferry__wire_push_task_reply_returns_at(v, 0);
	ftest_assert_true(ferry__wire_task_return_in_store(r));
	ftest_assert_uint_eq(ferry__wire_task_return_size(r), size);
	check_in_store(&oid, want, size);
	free(want);
	sim_stop();
}

/* A ref argument whose object never comes: the task fails with -ETIMEDOUT naming it, and the
 * worker serves the next task. */
FTEST(ref_argument_that_never_appears_times_out)
{
	struct task t = {.fn = "echo", .nargs = 1};
	struct task t2 = {.fn = "echo", .nargs = 1};
	struct ferry__wire_push_task_reply_view v;
	struct ferry_task_id put_task;
	struct ferry_object_id oid;
	char hex[FERRY_ID_HEX_MAX];

	setenv("FERRY_ARG_TIMEOUT_MS", "300", 1); /* the worker inherits it */
	sim_ready();
	ferry_task_id_random(&put_task);
	ferry_object_id_for_put(&put_task, 1, &oid);
	ferry_object_id_to_hex(&oid, hex, sizeof(hex));
	t.args[0].is_ref = true;
	t.args[0].object_id = oid;
	ftest_assert_true(push(&t));
	v = reply(&t);
	ftest_log("status %d: %s", ferry__wire_push_task_reply_status(v), reply_message(v));
	ftest_assert_int_eq(ferry__wire_push_task_reply_status(v), -ETIMEDOUT);
	ftest_assert_true(str_has(reply_message(v), "did not appear in the store"));
	ftest_assert_true(str_has(reply_message(v), hex));
	t2.args[0] = inline_arg("x", 1);
	ftest_assert_true(push(&t2));
	ftest_assert_int_eq(ferry__wire_push_task_reply_status(reply(&t2)), 0);
	sim_stop();
}

/* A ref argument is read from the store (and released after the task). */
FTEST(ref_argument_read_from_the_store)
{
	struct ferry_plasma_client *c = NULL;
	struct ferry_object_id oid;
	struct ferry_task_id put_task;
	char data[1000];
	struct task t = {.fn = "echo", .nargs = 1};
	struct ferry__wire_push_task_reply_view v;
	struct ferry__wire_task_return_view r;

	memset(data, 'r', sizeof(data));
	sim_ready();
	ferry_task_id_random(&put_task);
	ferry_object_id_for_put(&put_task, 1, &oid);
	ftest_assert_ok(ferry_plasma_client_connect(S.store.path, NULL, &c));
	ftest_assert_ok(ferry_plasma_client_put(c, &oid, data, sizeof(data), NULL, 0));
	t.args[0].is_ref = true;
	t.args[0].object_id = oid;
	ftest_assert_true(push(&t));
	v = reply(&t);
	ftest_assert_int_eq(ferry__wire_push_task_reply_status(v), 0);
	r = ferry__wire_push_task_reply_returns_at(v, 0);
	ftest_assert_uint_eq(ferry__wire_task_return_data_count(r), sizeof(data));
	ftest_assert_mem_eq(ferry__wire_task_return_data_data(r), data, sizeof(data));
	ferry_plasma_client_disconnect(c);
	sim_stop();
}

FTEST(fail_reports_its_errno_and_message)
{
	struct task t = {.fn = "fail"};
	struct ferry__wire_push_task_reply_view v;

	sim_ready();
	ftest_assert_true(push(&t));
	v = reply(&t);
	ftest_assert_int_eq(ferry__wire_push_task_reply_status(v), -EINVAL);
	ftest_assert_str_eq(reply_message(v), "bad input 7");
	ftest_assert_uint_eq(ferry__wire_push_task_reply_returns_count(v), 0);
	sim_stop();
}

FTEST(unknown_function_is_enoent_naming_it)
{
	struct task t = {.fn = "no_such_fn"};
	struct ferry__wire_push_task_reply_view v;
	char want[256], node[FERRY_ID_HEX_MAX], worker[FERRY_ID_HEX_MAX];

	sim_ready();
	ftest_assert_true(push(&t));
	v = reply(&t);
	ftest_assert_int_eq(ferry__wire_push_task_reply_status(v), -ENOENT);
	ferry_node_id_to_hex(&S.nid, node, sizeof(node));
	ferry_worker_id_to_hex(&S.wid, worker, sizeof(worker));
	snprintf(want, sizeof(want),
		 "no function 'no_such_fn' on node %s (worker %s): is it in the job's library?",
		 node, worker);
	ftest_assert_str_eq(reply_message(v), want);
	sim_stop();
}

/* Bad contexts and indexes inside a task are -EINVAL (job_lib.c's misuse checks them). */
FTEST(task_api_refuses_bad_contexts)
{
	struct ferry__wire_push_task_reply_view v;

	sim_ready();
	for (int i = 0; i < 2; i++) {
		struct task t = {.fn = "misuse"};

		ftest_assert_true(push(&t));
		v = reply(&t);
		ftest_assert_str_eq(reply_message(v), "");
		ftest_assert_int_eq(ferry__wire_push_task_reply_status(v), 0);
	}
	sim_stop();
}

static bool str_has(const char *s, const char *part)
{
	return strstr(s, part) != NULL;
}

FTEST(library_that_does_not_load_names_it)
{
	char path[256], junk[256];
	int fd;

	sim_start(0);
	snprintf(path, sizeof(path), "%s/missing.so", ftest_tmpdir());
	ftest_assert_int_eq(assign(path, &S.job, false), -ENOENT);
	ftest_assert_true(str_has(S.assign_message, path));
	/* The worker failed its job: it stays failed, and runs nothing. */
	ftest_assert_int_eq(assign(path, &S.job, false), -ENOENT);
	sim_stop();

	memset(&S, 0, sizeof(S));
	sim_start(0);
	snprintf(junk, sizeof(junk), "%s/junk.so", ftest_tmpdir());
	fd = open(junk, O_WRONLY | O_CREAT | O_TRUNC, 0700);
	ftest_assert_int_ge(fd, 0);
	ftest_assert_int_eq(write(fd, "not an ELF file", 15), 15);
	close(fd);
	ftest_assert_int_eq(assign(junk, &S.job, false), -ENOEXEC);
	ftest_assert_true(str_has(S.assign_message, junk));
	sim_stop();
}

FTEST(library_hash_mismatch_is_ebadmsg)
{
	const char *lib = need_env("FERRY_TEST_JOB");

	sim_start(0);
	ftest_assert_int_eq(assign(lib, &S.job, true), -EBADMSG);
	ftest_assert_true(str_has(S.assign_message, lib));
	ftest_assert_true(str_has(S.assign_message, "hash"));
	sim_stop();
}

FTEST(failing_setup_names_the_function)
{
	const char *lib = need_env("FERRY_TEST_JOB_BADSETUP");
	struct task t = {.fn = "never"};
	struct ferry__wire_push_task_reply_view v;

	sim_start(0);
	ftest_assert_int_eq(assign(lib, &S.job, false), -ENODEV);
	ftest_assert_true(str_has(S.assign_message, "worker setup function 'broken_setup'"));
	ftest_assert_true(str_has(S.assign_message, "no GPU here"));
	ftest_assert_true(str_has(S.assign_message, lib));
	owner_connect(FERRY_WIRE_PROTOCOL_VERSION);
	/* A worker whose job failed runs none of it, though the library loaded. */
	ftest_assert_true(push(&t));
	v = reply(&t);
	ftest_assert_int_eq(ferry__wire_push_task_reply_status(v), -ENODEV);
	ftest_assert_true(str_has(reply_message(v), "broken_setup"));
	sim_stop();
}

FTEST(function_registered_twice_is_eexist_naming_it)
{
	sim_start(0);
	ftest_assert_int_eq(assign(need_env("FERRY_TEST_JOB_DUP"), &S.job, false), -EEXIST);
	ftest_assert_true(str_has(S.assign_message, "'twice'"));
	sim_stop();
}

FTEST(second_job_is_ebusy)
{
	struct ferry_job_id other;

	sim_start(0);
	ftest_assert_int_eq(assign(need_env("FERRY_TEST_JOB"), &S.job, false), 0);
	ftest_assert_int_eq(assign(need_env("FERRY_TEST_JOB"), &S.job, false), 0);
	ferry_job_id_random(&other);
	ftest_assert_int_eq(assign(need_env("FERRY_TEST_JOB_BADSETUP"), &other, false), -EBUSY);
	sim_stop();
}

FTEST(worker_exits_when_the_node_closes_and_removes_its_socket)
{
	struct stat st;
	int status;

	sim_ready();
	ftest_assert_int_eq(stat(S.listen_path, &st), 0);
	ftest_assert_true(S_ISSOCK(st.st_mode));
	ferry__conn_close(S.node_side);
	run_until(S.loop, node_side_closed, NULL);
	status = worker_wait();
	ftest_assert_true(WIFEXITED(status));
	ftest_assert_int_eq(WEXITSTATUS(status), 0);
	ftest_assert_int_eq(stat(S.listen_path, &st), -1);
	ftest_assert_int_eq(errno, ENOENT);
	sim_stop();
}

FTEST(worker_exits_on_sigterm_and_removes_its_socket)
{
	struct stat st;
	int status;

	sim_ready();
	kill(S.worker_pid, SIGTERM);
	status = worker_wait();
	ftest_assert_true(WIFEXITED(status));
	ftest_assert_int_eq(WEXITSTATUS(status), 0);
	ftest_assert_int_eq(stat(S.listen_path, &st), -1);
	sim_stop();
}

FTEST(worker_refused_by_its_node_exits_1)
{
	int status;

	sim_start(-EACCES);
	run_until(S.loop, node_side_closed, NULL); /* the reply goes out; the worker leaves */
	status = worker_wait();
	ftest_assert_true(WIFEXITED(status));
	ftest_assert_int_eq(WEXITSTATUS(status), 1);
	sim_stop();
}

FTEST(missing_environment_exits_2_naming_it)
{
	char buf[512] = {0};
	int pipefd[2], status;
	ssize_t n;

	sim_start(0);
	ftest_assert_int_eq(pipe(pipefd), 0);
	{
		pid_t pid = spawn_worker(false, pipefd[1]);

		close(pipefd[1]);
		n = read(pipefd[0], buf, sizeof(buf) - 1);
		ftest_assert_int_gt(n, 0);
		ftest_assert_int_eq(waitpid(pid, &status, 0), pid);
	}
	close(pipefd[0]);
	ftest_assert_true(WIFEXITED(status));
	ftest_assert_int_eq(WEXITSTATUS(status), 2);
	ftest_assert_true(str_has(buf, "FERRY_WORKER_ID"));
	sim_stop();
}

FTEST(crashing_task_kills_only_the_worker)
{
	struct task t = {.fn = "crash"};
	int status;

	sim_ready();
	ftest_assert_false(push(&t));
	status = worker_wait();
	/* Killed by the signal; under a sanitizer its handler reports it and exits 1 instead. */
	if (WIFSIGNALED(status))
		ftest_assert_int_eq(WTERMSIG(status), SIGSEGV);
	else
		ftest_assert_true(WIFEXITED(status) && WEXITSTATUS(status) != 0);
	sim_stop();
}

/* Malformed tasks get an error reply; malformed frames close that owner's socket; the worker
 * serves the next owner either way. */
FTEST(malformed_tasks_get_errors_and_the_worker_lives_on)
{
	int64_t a = 2, b = 3;
	struct task t = {.fn = "add", .nargs = 2, .num_returns = 100000};
	struct task nil = {.fn = "add", .nil_id = true};
	struct task ref = {.fn = "echo", .nargs = 1};
	struct task ok = {.fn = "add", .nargs = 2};
	struct ferry__wire_push_task_reply_view v;
	int before;

	sim_ready();
	t.args[0] = ok.args[0] = inline_arg(&a, sizeof(a));
	t.args[1] = ok.args[1] = inline_arg(&b, sizeof(b));
	ftest_assert_true(push(&t));
	v = reply(&t);
	ftest_assert_int_eq(ferry__wire_push_task_reply_status(v), -EINVAL);
	ftest_assert_true(str_has(reply_message(v), "num_returns"));
	ftest_assert_true(push(&nil));
	ftest_assert_int_eq(ferry__wire_push_task_reply_status(reply(&nil)), -EINVAL);
	ref.args[0].is_ref = true; /* a ref with no object */
	ftest_assert_true(push(&ref));
	ftest_assert_int_eq(ferry__wire_push_task_reply_status(reply(&ref)), -EINVAL);

	/* Not a PushTask payload: the worker closes this socket. */
	before = S.replies;
	ftest_assert_ok(ferry__conn_send(S.owner, FERRY__WIRE_MSG_PUSH_TASK, "garbage!", 8));
	run_until(S.loop, replied_or_closed, &before);
	ftest_assert_true(S.owner_closed);

	/* A PushTask before RuntimeConnect, and a RuntimeConnect of another version. */
	owner_connect(0);
	ftest_assert_false(push(&ok));
	owner_connect(FERRY_WIRE_PROTOCOL_VERSION + 1);
	ftest_assert_false(push(&ok));

	owner_connect(FERRY_WIRE_PROTOCOL_VERSION);
	ftest_assert_true(push(&ok));
	ftest_assert_int_eq(ferry__wire_push_task_reply_status(reply(&ok)), 0);
	sim_stop();
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* A figure for the record, not a speed assert: sync round trips of add through the worker's
 * socket (the owner and the node's side here run on one test loop). */
FTEST(sync_add_round_trip_figure)
{
	enum { N = 2000 };
	int64_t a = 2, b = 3;
	struct task t = {.fn = "add", .nargs = 2};
	uint64_t *us = malloc(N * sizeof(*us));

	ftest_assert_ptr_notnull(us);
	sim_ready();
	t.args[0] = inline_arg(&a, sizeof(a));
	t.args[1] = inline_arg(&b, sizeof(b));
	for (int i = 0; i < N; i++) {
		struct timespec t0, t1;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		ftest_assert_true(push(&t));
		clock_gettime(CLOCK_MONOTONIC, &t1);
		ftest_assert_int_eq(ferry__wire_push_task_reply_status(reply(&t)), 0);
		us[i] = (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000ll +
				   (t1.tv_nsec - t0.tv_nsec)) /
			1000;
	}
	qsort(us, N, sizeof(*us), cmp_u64);
	ftest_log("%d sync add tasks: p50 %llu us, p99 %llu us", N, (unsigned long long)us[N / 2],
		  (unsigned long long)us[N * 99 / 100]);
	free(us);
	sim_stop();
}
