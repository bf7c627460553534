/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Single-producer single-consumer rings of fixed slots in a mapping shared with another
 * process (ring.h). The peer is not trusted: a head, tail or length read from the mapping is
 * checked before it indexes anything, a message is copied out before anyone looks at it, and
 * a reader takes at most one ring's worth per look (a peer cannot make it loop).
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "runtime/ring.h"

_Static_assert(2 * sizeof(struct ferry__ring_ctl) <= FERRY__RING_CTL_BYTES, "ring counters");
_Static_assert(sizeof(_Atomic uint32_t) == sizeof(uint32_t), "shared counters are plain words");

int ferry__ring_check(uint32_t slot_bytes, uint32_t nslots, uint64_t bytes)
{
	if (slot_bytes < FERRY__RING_SLOT_BYTES_MIN || slot_bytes > FERRY__RING_SLOT_BYTES_MAX ||
	    slot_bytes % 64)
		return -EINVAL;
	if (nslots < 2 || nslots > FERRY__RING_SLOTS_MAX || (nslots & (nslots - 1)))
		return -EINVAL;
	if (ferry__ring_bytes(slot_bytes, nslots) > FERRY__RING_BYTES_MAX ||
	    bytes != ferry__ring_bytes(slot_bytes, nslots))
		return -EINVAL;
	return 0;
}

uint64_t ferry__ring_bytes(uint32_t slot_bytes, uint32_t nslots)
{
	return FERRY__RING_CTL_BYTES + 2 * (uint64_t)slot_bytes * nslots;
}

void ferry__ring_dir_init(struct ferry__ring_dir *d, void *base, unsigned which,
			  uint32_t slot_bytes, uint32_t nslots)
{
	uint8_t *b = base;

	d->ctl = (struct ferry__ring_ctl *)(void *)b + which;
	d->slots = b + FERRY__RING_CTL_BYTES + (size_t)which * slot_bytes * nslots;
	d->slot_bytes = slot_bytes;
	d->nslots = nslots;
	d->pos = 0;
}

static uint8_t *slot_at(const struct ferry__ring_dir *d, uint32_t pos)
{
	return d->slots + (size_t)(pos & (d->nslots - 1)) * d->slot_bytes;
}

int ferry__ring_put(struct ferry__ring_dir *d, uint16_t type, const void *payload, size_t len)
{
	uint32_t tail = atomic_load_explicit(&d->ctl->tail, memory_order_acquire);
	uint32_t used = d->pos - tail;
	uint8_t *slot;

	if (len > ferry__ring_payload_max(d))
		return -EMSGSIZE;
	if (used > d->nslots)
		return -EPROTO; /* a tail ahead of our head, or more than a ring behind */
	if (used == d->nslots)
		return -EAGAIN;
	slot = slot_at(d, d->pos);
	/* The header as two relaxed stores: the head's release below publishes them. */
	__atomic_store_n((uint32_t *)(void *)slot, (uint32_t)len, __ATOMIC_RELAXED);
	__atomic_store_n((uint16_t *)(void *)(slot + 4), type, __ATOMIC_RELAXED);
	if (len)
		memcpy(slot + FERRY__RING_SLOT_HEADER, payload, len);
	d->pos++;
	atomic_store_explicit(&d->ctl->head, d->pos, memory_order_release);
	return 0;
}

bool ferry__ring_pending(const struct ferry__ring_dir *d)
{
	return atomic_load_explicit(&d->ctl->head, memory_order_relaxed) != d->pos;
}

int ferry__ring_get(struct ferry__ring_dir *d, void *buf, uint16_t *type, size_t *len)
{
	uint32_t head = atomic_load_explicit(&d->ctl->head, memory_order_acquire);
	uint32_t avail = head - d->pos, n;
	uint8_t *slot;

	if (avail == 0)
		return 0;
	if (avail > d->nslots)
		return -EPROTO; /* a head behind our tail, or more than a ring ahead */
	slot = slot_at(d, d->pos);
	/* Read once, as atomics: the compiler may not read the peer's memory again later. */
	n = __atomic_load_n((uint32_t *)(void *)slot, __ATOMIC_RELAXED);
	if (n > ferry__ring_payload_max(d))
		return -EPROTO;
	*type = __atomic_load_n((uint16_t *)(void *)(slot + 4), __ATOMIC_RELAXED);
	if (n)
		memcpy(buf, slot + FERRY__RING_SLOT_HEADER, n);
	*len = n;
	d->pos++;
	/* The copy is ours: the slot goes back to the producer at once. */
	atomic_store_explicit(&d->ctl->tail, d->pos, memory_order_release);
	return 1;
}

int ferry__ring_wake(struct ferry__ring_dir *d, uint32_t *woken, int fd)
{
	uint64_t one = 1;
	uint32_t asleep;

	/* Publish, then look whether the consumer sleeps (ring_conn.c's DESIGN: Wait). */
	atomic_thread_fence(memory_order_seq_cst);
	asleep = atomic_load(&d->ctl->sleeping);
	if (!asleep || asleep == *woken)
		return 0;
	*woken = asleep;
	if (write(fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		return -errno;
	return 0;
}
