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
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

static void send_state(void *arg, int status)
{
	bool want;

	(void)arg;
	pthread_mutex_lock(&ferry__rt.lock);
	post_pending = false;
	want = waits > 0;
	pthread_mutex_unlock(&ferry__rt.lock);
	if (status < 0 || want == last_sent)
		return;
	if (ferry__rt_sub_send_blocked(want) == 0)
		last_sent = want;
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
