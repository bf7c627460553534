/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The shared-memory backend: two plasma stores on one host. The puller is a plasma client of
 * the other store too; it gets the object there (a pinned, zero-copy view of the other arena),
 * copies it into its own create buffer (the only copy) and releases the view.
 *
 * Thread model: a peer set may be used from any thread (one lock; clients are thread-safe).
 */
#ifndef FERRY_TRANSPORT_SHM_H
#define FERRY_TRANSPORT_SHM_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <ferry/plasma.h>

#define FERRY__SHM_MAX_PEERS 16

/* Clients of other stores on this host, by socket path and the run id of the node that serves
 * it: a node restarted at the same path is a new store (the old client sees only the dead
 * one's shared index), so a different run id drops the old client and connects anew. */
struct ferry__shm_peers {
	pthread_mutex_t lock; /* the table */
	struct {
		char path[108];			    /* store socket */
		uint64_t run;			    /* the node's run id there (0: unknown) */
		struct ferry_plasma_client *client; /* connected */
		unsigned refs;			    /* pulls using it now */
		bool dead;			    /* disconnect at the last ref */
	} peer[FERRY__SHM_MAX_PEERS];		    /* slots; client NULL = free */
};

void ferry__shm_peers_init(struct ferry__shm_peers *p);
/* Disconnect every client. */
void ferry__shm_peers_fini(struct ferry__shm_peers *p);

/*
 * ferry__shm_pull() - copy sealed object @id from the store at @path (served by the node run
 * @run, 0: unknown, see struct ferry__node_addr) into @own as a new
 * secondary copy and seal it there. @admit(@arg, bytes) is called with the object's size before
 * the create (it may block; a negative return aborts with it) and @unadmit(@arg, bytes) after.
 * *@bytes gets data + metadata bytes. Returns 0, -ENOENT (not sealed there), -ECONNRESET /
 * -ECONNREFUSED (that store is gone; its client is dropped), or the create error (-EEXIST,
 * -ENOSPC, -E2BIG): then nothing is left half-written in @own.
 */
int ferry__shm_pull(struct ferry__shm_peers *p, const char *path, uint64_t run,
		    struct ferry_plasma_client *own, const struct ferry_object_id *id,
		    int (*admit)(void *arg, uint64_t bytes),
		    void (*unadmit)(void *arg, uint64_t bytes), void *arg, uint64_t *bytes);

/*
 * ferry__shm_view_nowait() - a pinned view of sealed object @id in the store at @path, without
 * blocking: only through a client already connected there (to the store of run @run) and the
 * store's shared index (the
 * loop's fast path). 0: *@v and *@slot set, give both back with ferry__shm_view_done(); -EAGAIN
 * (not connected yet, or that store would have to help: a pull thread does it), -ENOENT,
 * -ECONNRESET, -EPROTO.
 */
int ferry__shm_view_nowait(struct ferry__shm_peers *p, const char *path, uint64_t run,
			   const struct ferry_object_id *id, int *slot,
			   struct ferry_plasma_view *v);
void ferry__shm_view_done(struct ferry__shm_peers *p, int slot, struct ferry_plasma_view *v);

#endif
