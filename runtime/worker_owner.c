/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A worker process as an owner: its tasks call ferry_submit, ferry_get, ferry_wait and
 * ferry_put like a driver (the runtime of init.c, started by worker_assign.c once the job's
 * library is loaded, with the worker's own id). This file is what differs: a task that waits
 * in a get tells its node (WorkerBlocked on the owner line), which lends the lease's CPU to
 * the tasks it waits for and takes it back when the wait ends.
 *
 * DESIGN
 * - ferry__rt_block/unblock run on whichever thread waits, with ferry__rt.lock held: they
 *   count the waits and post one message to the runtime's loop per change of "any waiting";
 *   the loop thread sends the state as it is then (last_sent avoids repeating it), so a wait
 *   that ends before the post ran sends nothing at all.
 * - A wait told to the node while a PushTask runs gets a number and names that task
 *   (worker.h: the bounce of what came behind it). The worker's loop thread marks the PushTask
 *   it runs (push_or_bounce) and the runtime's loop thread numbers the wait, both under
 *   plain_lock: a number is always taken by the task it names, at that task's end, even when
 *   the task ended while WorkerBlocked was on its way. plain_lock is never held with another.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/conn.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/sha256.h"
#include "runtime/owner.h"
#include "runtime/rt.h"
#include "runtime/worker.h"

#define COMP "worker"

static unsigned waits;	  /* gets and waits sleeping in a task; under ferry__rt.lock */
static bool post_pending; /* a send_state is on its way; under ferry__rt.lock */
static bool last_sent;	  /* what the node was told; loop thread */

static pthread_mutex_t plain_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ferry_task_id plain_task; /* the PushTask the worker's loop runs; plain_lock */
static bool plain_running;		/* whether one runs; plain_lock */
static uint64_t plain_wait;		/* the last wait numbered in it, or 0; plain_lock */
static uint64_t wait_ids;		/* waits numbered in this process; plain_lock */
/* The socket of the PushTask the calling thread runs (the worker's loop thread), or NULL. */
static _Thread_local struct ferry__conn *plain_conn;

/* The wait told to the node now: its number and the PushTask it names (0: none runs, or
 * @again and the running one has its number already). */
static uint64_t number_wait(struct ferry_task_id *task, bool again)
{
	uint64_t id = 0;

	pthread_mutex_lock(&plain_lock);
	if (plain_running && !(again && plain_wait)) {
		id = plain_wait = ++wait_ids;
		*task = plain_task;
	}
	pthread_mutex_unlock(&plain_lock);
	return id;
}

static void send_state(void *arg, int status)
{
	struct ferry_task_id task;
	uint64_t wait_id = 0;
	bool want;

	(void)arg;
	pthread_mutex_lock(&ferry__rt.lock);
	post_pending = false;
	want = waits > 0;
	pthread_mutex_unlock(&ferry__rt.lock);
	if (status < 0 || (want == last_sent && !want))
		return;
	/* Told already, by a wait that ended before this post ran: a task waiting since then is
	 * told too, or the tasks behind it would stay behind it. */
	if (want)
		wait_id = number_wait(&task, last_sent);
	if (want && last_sent && !wait_id)
		return;
	/* A numbered wait that is not sent still bounces: the owner learns of it from the
	 * bounce (runtime/lease.c: on_bounce). */
	if (ferry__rt_sub_send_blocked(want, wait_id ? &task : NULL, wait_id) == 0)
		last_sent = want;
}

int ferry__worker_push_or_bounce(struct ferry__worker *w, struct ferry__worker_bounce *b,
				 struct ferry__conn *conn, const void *payload, size_t len)
{
	struct ferry__wire_unique_id tid;
	uint64_t waited;
	int ret;

	if (b->waited > b->recalled)
		return ferry__worker_bounce_reply(w, payload, b->waited);
	tid = ferry__wire_push_task_task_id(ferry__wire_push_task_root_verified(payload));
	pthread_mutex_lock(&plain_lock);
	memcpy(plain_task.bytes, tid.bytes, sizeof(plain_task.bytes));
	plain_running = true;
	plain_wait = 0;
	pthread_mutex_unlock(&plain_lock);
	plain_conn = conn;
	ret = ferry__worker_push_task(w, payload, len);
	plain_conn = NULL;
	pthread_mutex_lock(&plain_lock);
	plain_running = false;
	waited = plain_wait;
	pthread_mutex_unlock(&plain_lock);
	if (waited > b->waited)
		b->waited = waited;
	return ret;
}

void ferry__worker_tasks_recalled(struct ferry__worker_bounce *b, const void *payload)
{
	uint64_t wait_id = ferry__wire_tasks_recalled_wait_id(
		ferry__wire_tasks_recalled_root_verified(payload));

	/* A wait is taken by its socket at its task's end, before the socket's next frame is
	 * read: a TasksRecalled of a later one is the owner's mistake, and heeding it would stop
	 * the bounces of waits to come. */
	if (wait_id > b->waited) {
		FLOG_WARN(COMP,
			  "TasksRecalled of wait %" PRIu64 ", which no task of its socket had "
			  "(the last: %" PRIu64 "): ignored",
			  wait_id, b->waited);
		return;
	}
	if (wait_id > b->recalled)
		b->recalled = wait_id;
}

static void post_state(void)
{
	if (!post_pending && ferry__loop_post(ferry__rt.loop, send_state, NULL) == 0)
		post_pending = true;
}

bool ferry__rt_block(void)
{
	if (!ferry__rt.worker || !ferry__rt.loop || !ferry__worker_task_running())
		return false;
	/* The replies of the tasks before this one may still be queued on its socket, written at
	 * the end of the worker's loop pass, after this task: what it waits for may need them. */
	if (plain_conn) {
		ferry__conn_flush(plain_conn);
		(void)ferry__loop_submit(ferry__conn_loop(plain_conn));
	}
	if (waits++ == 0)
		post_state();
	return true;
}

void ferry__rt_unblock(bool counted)
{
	if (!counted)
		return;
	if (--waits == 0 && ferry__rt.loop)
		post_state();
}

void ferry__rt_block_reset(void)
{
	waits = 0;
	post_pending = false;
	last_sent = false;
	pthread_mutex_lock(&plain_lock);
	plain_running = false;
	plain_wait = 0;
	pthread_mutex_unlock(&plain_lock);
}

/* What the runtime names itself with; copies, since WorkerAssign's bytes go with its frame. */
static struct ferry__rt_worker_info info;
static char info_code_path[4096];
static uint8_t info_code_hash[FERRY_SHA256_SIZE];

int ferry__worker_owner_start(struct ferry__worker *w, const char *code_path,
			      const uint8_t *code_hash)
{
	if (!w->opts || !w->store)
		return 0; /* no node or store (tests of the decoder): tasks cannot submit */
	snprintf(info_code_path, sizeof(info_code_path), "%s", code_path);
	memcpy(info_code_hash, code_hash, sizeof(info_code_hash));
	info = (struct ferry__rt_worker_info){
		.id = w->id,
		.job = w->job,
		.node = w->node_id,
		.store_socket = w->opts->store_socket,
		.code_path = info_code_path,
		.code_hash = info_code_hash,
		.secret = w->opts->secret,
		.secret_len = w->opts->secret_len,
		.listen_path = w->listen_path,
	};
	return ferry__rt_init_worker(&info);
}

void ferry__worker_owner_stop(void)
{
	ferry_shutdown(); /* nothing when it never started */
}

bool ferry__worker_owner_serves(struct ferry__worker *w, const struct ferry_ref *ref)
{
	char path[sizeof(ferry__rt.store_socket)];

	if (!ferry__rt.up || !w->store || ferry__rt_is_self(&ref->owner) ||
	    ferry_id_is_nil(ref->owner.bytes, sizeof(ref->owner.bytes)) ||
	    ferry_plasma_client_contains(w->store, &ref->id) == 1)
		return false;
	return ferry__rt_owner_path(ferry__rt.store_socket, &ref->owner, path, sizeof(path)) == 0 &&
	       access(path, F_OK) == 0;
}
