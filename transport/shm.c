/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The shared-memory backend: pull an object from another plasma store on this host by being
 * its client too (zero-copy view of its arena) and copying once into the own store.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "plasma/client_arena.h"
#include "transport/shm.h"

#define COMP "shm"

void ferry__shm_peers_init(struct ferry__shm_peers *p)
{
	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->lock, NULL);
}

void ferry__shm_peers_fini(struct ferry__shm_peers *p)
{
	for (unsigned i = 0; i < FERRY__SHM_MAX_PEERS; i++) {
		ferry_plasma_client_disconnect(p->peer[i].client);
		p->peer[i].client = NULL;
	}
	pthread_mutex_destroy(&p->lock);
}

/* Slot @i (lock held, connected, not dead) is @path's: with @run, also of that run. A client
 * of another run there is of a predecessor: marked dead (disconnected at its last ref). */
static bool slot_is(struct ferry__shm_peers *p, int i, const char *path, uint64_t run)
{
	if (strcmp(p->peer[i].path, path))
		return false;
	if (!run || !p->peer[i].run || p->peer[i].run == run)
		return true;
	FLOG_WARN(COMP, "store %s belongs to a restarted node now: reconnecting", path);
	p->peer[i].dead = true;
	if (p->peer[i].refs == 0) {
		ferry_plasma_client_disconnect(p->peer[i].client);
		p->peer[i].client = NULL;
	}
	return false;
}

/* The slot connected to @path (connecting if needed), with a reference; -errno. */
static int acquire(struct ferry__shm_peers *p, const char *path, uint64_t run)
{
	struct ferry_plasma_connect_opts co = {.name = "objmgr-shm"};
	int free_slot = -1, ret;

	pthread_mutex_lock(&p->lock);
	for (int i = 0; i < FERRY__SHM_MAX_PEERS; i++) {
		if (p->peer[i].client && !p->peer[i].dead && slot_is(p, i, path, run)) {
			p->peer[i].refs++;
			pthread_mutex_unlock(&p->lock);
			return i;
		}
		if (!p->peer[i].client && free_slot < 0)
			free_slot = i;
	}
	if (free_slot < 0) {
		pthread_mutex_unlock(&p->lock);
		FLOG_WARN(COMP, "no free slot for store %s", path);
		return -EUSERS;
	}
	/* Connecting under the lock keeps two pulls from connecting twice; it is a local
	 * socket round trip and a mapping. */
	ret = ferry_plasma_client_connect(path, &co, &p->peer[free_slot].client);
	if (ret == 0) {
		snprintf(p->peer[free_slot].path, sizeof(p->peer[free_slot].path), "%s", path);
		p->peer[free_slot].run = run;
		p->peer[free_slot].refs = 1;
		p->peer[free_slot].dead = false;
		ret = free_slot;
	} else {
		p->peer[free_slot].client = NULL;
		FLOG_INFO(COMP, "cannot connect to store %s: %s", path, ferry_strerror(-ret));
	}
	pthread_mutex_unlock(&p->lock);
	return ret;
}

static void unref(struct ferry__shm_peers *p, int slot, bool dead)
{
	struct ferry_plasma_client *gone = NULL;

	pthread_mutex_lock(&p->lock);
	if (dead)
		p->peer[slot].dead = true;
	if (--p->peer[slot].refs == 0 && p->peer[slot].dead) {
		gone = p->peer[slot].client;
		p->peer[slot].client = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	ferry_plasma_client_disconnect(gone);
}

static int copy_in(struct ferry_plasma_client *own, struct ferry_plasma_client *peer,
		   const struct ferry_plasma_view *v, int (*admit)(void *arg, uint64_t bytes),
		   void (*unadmit)(void *arg, uint64_t bytes), void *arg)
{
	uint64_t total = v->data_size + v->metadata_size;
	struct ferry_worker_id owner;
	void *dst;
	int ret;

	/* The copy keeps the owner the peer's store has for it. */
	ret = ferry__plasma_client_view_owner(peer, v, &owner);
	if (ret < 0)
		return ret;
	ret = admit(arg, total);
	if (ret < 0)
		return ret;
	ret = ferry_plasma_client_create_owned(own, &v->id, v->data_size, v->metadata,
					       v->metadata_size, FERRY_PLASMA_CREATE_SECONDARY,
					       &owner, &dst);
	if (ret == 0) {
		if (v->data_size)
			memcpy(dst, v->data, v->data_size);
		ret = ferry_plasma_client_seal(own, &v->id);
		if (ret < 0)
			(void)ferry_plasma_client_abort(own, &v->id);
	}
	unadmit(arg, total);
	return ret;
}

int ferry__shm_view_nowait(struct ferry__shm_peers *p, const char *path, uint64_t run,
			   const struct ferry_object_id *id, int *slot, struct ferry_plasma_view *v)
{
	int i, ret;

	pthread_mutex_lock(&p->lock);
	for (i = 0; i < FERRY__SHM_MAX_PEERS; i++)
		if (p->peer[i].client && !p->peer[i].dead && slot_is(p, i, path, run))
			break;
	if (i == FERRY__SHM_MAX_PEERS) {
		pthread_mutex_unlock(&p->lock);
		return -EAGAIN; /* connecting is a round trip: not here */
	}
	p->peer[i].refs++;
	pthread_mutex_unlock(&p->lock);
	ret = ferry__plasma_client_get_nowait(p->peer[i].client, id, v);
	if (ret < 0) {
		unref(p, i, ret == -ECONNRESET);
		return ret;
	}
	*slot = i;
	return 0;
}

void ferry__shm_view_done(struct ferry__shm_peers *p, int slot, struct ferry_plasma_view *v)
{
	(void)ferry_plasma_client_release(p->peer[slot].client, v);
	unref(p, slot, false);
}

int ferry__shm_pull(struct ferry__shm_peers *p, const char *path, uint64_t run,
		    struct ferry_plasma_client *own, const struct ferry_object_id *id,
		    int (*admit)(void *arg, uint64_t bytes),
		    void (*unadmit)(void *arg, uint64_t bytes), void *arg, uint64_t *bytes)
{
	struct ferry_plasma_view v;
	int slot, ret;

	slot = acquire(p, path, run);
	if (slot < 0)
		return slot == -ENOENT ? -ECONNREFUSED : slot;
	ret = ferry_plasma_client_get(p->peer[slot].client, id, 1, 0, &v);
	if (ret < 0) {
		unref(p, slot, ret == -ECONNRESET);
		return ret == -ETIMEDOUT ? -ENOENT : ret;
	}
	ret = copy_in(own, p->peer[slot].client, &v, admit, unadmit, arg);
	if (ret == 0)
		*bytes = v.data_size + v.metadata_size;
	(void)ferry_plasma_client_release(p->peer[slot].client, &v);
	unref(p, slot, false);
	return ret;
}
