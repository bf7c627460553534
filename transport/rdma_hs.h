/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The RDMA engine's handshake, carried in rdma_cm's connect private data (network byte order;
 * a connect request holds 56 bytes of it on IB, so the hello is exactly that):
 *   connect -> hello   {magic, version, recv_depth, msg_size, token_len, token[40]}
 *   accept  <- welcome {magic, version, recv_depth, msg_size, region_rkey, region_addr,
 *                       region_len}
 *   reject  <- refusal {magic, version, errno}: EACCES token, EPROTO version, ENOMEM
 * The welcome names the acceptor's registered region so that the connector can READ from it
 * before asking anything (transport/objmgr_rdma.c). An acceptor that sent only the first 12
 * bytes of a welcome leaves the rest zero (IB pads private data): no region.
 * Pure functions on bytes, so that the decoders are fuzzed (tests/fuzz/fuzz_rdma.c) and built
 * with or without verbs.
 */
#ifndef FERRY_TRANSPORT_RDMA_HS_H
#define FERRY_TRANSPORT_RDMA_HS_H

#include <stddef.h>
#include <stdint.h>

#include "transport/rdma.h"

#define FERRY__RDMA_HELLO_BYTES 56   /* the whole of IB's connect private data */
#define FERRY__RDMA_WELCOME_BYTES 32 /* of IB's 196 bytes of accept private data */
#define FERRY__RDMA_REFUSAL_BYTES 12

/* What one side tells the other. */
struct ferry__rdma_terms {
	uint16_t recv_depth;  /* receives the sender posts: the peer's credits (>= 4) */
	uint32_t msg_size;    /* bytes per receive buffer (>= 64) */
	uint32_t region_rkey; /* welcome: the acceptor's region key, */
	uint64_t region_addr; /* its start (0: none), */
	uint64_t region_len;  /* and its length */
};

/* The hello for @t (its region unused) and the cluster token (@token_len bytes of @token, or
 * 0xff: a FERRY__RDMA_TOKEN_MAX-byte digest) into @buf (FERRY__RDMA_HELLO_BYTES). */
void ferry__rdma_hello_write(void *buf, const struct ferry__rdma_terms *t, uint8_t token_len,
			     const uint8_t *token);

/*
 * ferry__rdma_hello_read() - a connect request's @len bytes at @buf: 0 and *@t (region zero)
 * when they are our hello with our version and sane terms and carry our token (compared in
 * constant time over the whole field); -EPROTO (not ours, short, other version), -EACCES
 * (another token).
 */
int ferry__rdma_hello_read(const void *buf, size_t len, uint8_t token_len, const uint8_t *token,
			   struct ferry__rdma_terms *t);

/* The welcome for @t into @buf (FERRY__RDMA_WELCOME_BYTES). */
void ferry__rdma_welcome_write(void *buf, const struct ferry__rdma_terms *t);

/* An accept's @len bytes at @buf: 0 and *@t, or -EPROTO (short, not ours, other version, or
 * terms out of range). A region that would wrap the address space reads as none. */
int ferry__rdma_welcome_read(const void *buf, size_t len, struct ferry__rdma_terms *t);

/* The refusal for -@err into @buf (FERRY__RDMA_REFUSAL_BYTES). */
void ferry__rdma_refusal_write(void *buf, int err);

/* A reject's @len bytes at @buf: -EACCES or -EPROTO when our peer refused our token or
 * version (the caller's to see), else -ECONNREFUSED. */
int ferry__rdma_refusal_read(const void *buf, size_t len);

#endif
