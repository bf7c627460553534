/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the transport needs of a plasma client beyond the public API: where the client mapped
 * the store's arena. The object manager registers that mapping once as its RDMA memory region,
 * so objects it creates (RDMA READ targets) and objects it serves (READ sources) both lie in it.
 */
#ifndef FERRY_PLASMA_CLIENT_ARENA_H
#define FERRY_PLASMA_CLIENT_ARENA_H

#include <stdbool.h>
#include <stdint.h>

struct ferry_plasma_client;
struct ferry_object_id;
struct ferry_plasma_view;
struct ferry_worker_id;

/* ferry__plasma_client_arena() - the client's mapping of the store's arena: its first byte
 * and its length. Valid until the client disconnects. */
void ferry__plasma_client_arena(const struct ferry_plasma_client *c, void **base, uint64_t *size);

/*
 * ferry__plasma_client_view_place() - where pinned @view's bytes lie: the data's offset in the
 * arena and the placement's id (plasma/layout.h: entry_ext.alloc; never names two placements,
 * so a peer that read the bytes at that offset before the pin can trust them when the pin
 * names the same id). 0, or -EINVAL (not a valid view).
 */
int ferry__plasma_client_view_place(const struct ferry_plasma_client *c,
				    const struct ferry_plasma_view *view, uint64_t *offset,
				    uint64_t *alloc);

/*
 * ferry__plasma_client_create_small() - ferry_plasma_client_create_owned() limited to the
 * client's chunk: never a request to the store, so a thread that must not block on the store
 * (the object manager's loop) may create. Returns as create_ex, or -ENOBUFS: too large for the
 * chunk, the chunk is full (create_ex would ask the store), or another thread of this client is
 * creating or refilling the chunk at this moment (waiting for it could mean a round trip).
 */
int ferry__plasma_client_create_small(struct ferry_plasma_client *c,
				      const struct ferry_object_id *id, uint64_t data_size,
				      const void *metadata, uint32_t metadata_size, unsigned flags,
				      const struct ferry_worker_id *owner, void **data);

/* ferry__plasma_client_view_owner() - the worker or driver that owns pinned @view's object
 * (nil: the node), from the shared index: no round trip. 0, or -EINVAL (not a valid view). */
int ferry__plasma_client_view_owner(const struct ferry_plasma_client *c,
				    const struct ferry_plasma_view *view,
				    struct ferry_worker_id *owner);

/*
 * ferry__plasma_client_get_nowait() - ferry_plasma_client_get() of one object with timeout 0,
 * from the shared index only: never a request to the store. 0 and *@view (release it as
 * usual), -ENOENT (not sealed there), -EAGAIN (the store would have to help: spilled, busy, or
 * this client's pin records are full), -EPROTO.
 */
int ferry__plasma_client_get_nowait(struct ferry_plasma_client *c, const struct ferry_object_id *id,
				    struct ferry_plasma_view *view);

/*
 * ferry__plasma_client_seal_begin() / _end() - ferry_plasma_client_seal() in two steps. begin
 * seals in the shared index (readers on this host see the object from then on) and returns 0,
 * 1 when the store must still be told (*@gen set; a pulled copy, which the store lists so it
 * can be evicted, or a hook or subscriber listens), 2 when it must be told now (a get or wait
 * is parked in the store), or the seal's error. end sends that notice (one-way). The object manager's loop calls back the
 * pull's waiters between the two: the waiters need the bytes, not the store's bookkeeping.
 *
 * With @later (only after a 1), the notice is held back in the client until the next frame
 * to the store or ferry__plasma_client_flush(), and end returns 1 when it is the only one held
 * (the caller must flush within the delay it can accept), else 0 or -errno. Each notice wakes
 * the store thread: on 2 cores that thread then runs where the loop would (10-15 us per pulled
 * copy here, ~250 us in the soft-RoCE VM); held back, a burst of copies wakes it once. Frames
 * keep their order: a held notice goes before any later request of this client.
 */
int ferry__plasma_client_seal_begin(struct ferry_plasma_client *c, const struct ferry_object_id *id,
				    uint32_t *gen);
int ferry__plasma_client_seal_end(struct ferry_plasma_client *c, const struct ferry_object_id *id,
				  uint32_t gen, bool later);

/* ferry__plasma_client_flush() - send the notices held back; with @wait, also wait until the
 * store has handled them (a round trip). 0 or -errno; without @wait on a client whose notices
 * never wait, -EAGAIN when the socket took only some (flush again later). */
int ferry__plasma_client_flush(struct ferry_plasma_client *c, bool wait);

/*
 * ferry__plasma_client_notices_nonblocking() - from now on @c's seal notices never wait for
 * the socket: a notice the socket cannot take now stays held (seal_end then returns 1, and the
 * caller flushes again later). For a client on the thread that serves its store (the object
 * manager on the node's loop): a blocking send there would wait for a read that only that
 * thread can do. Requests (round trips) still wait; such a client makes none on that thread.
 */
void ferry__plasma_client_notices_nonblocking(struct ferry_plasma_client *c);

#endif
