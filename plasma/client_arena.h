/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the transport needs of a plasma client beyond the public API: where the client mapped
 * the store's arena. The object manager registers that mapping once as its RDMA memory region,
 * so objects it creates (RDMA READ targets) and objects it serves (READ sources) both lie in it.
 */
#ifndef FERRY_PLASMA_CLIENT_ARENA_H
#define FERRY_PLASMA_CLIENT_ARENA_H

#include <stdint.h>

struct ferry_plasma_client;

/* ferry__plasma_client_arena() - the client's mapping of the store's arena: its first byte
 * and its length. Valid until the client disconnects. */
void ferry__plasma_client_arena(const struct ferry_plasma_client *c, void **base, uint64_t *size);

#endif
