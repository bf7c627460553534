/* SPDX-License-Identifier: Apache-2.0 */
/* The RDMA handshake's encoders and decoders (rdma_hs.h). */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <string.h>

#include "transport/rdma_hs.h"

#define RDMA_MAGIC 0x4652444du /* "FRDM" */

struct hello {
	uint32_t magic;			      /* RDMA_MAGIC */
	uint16_t version;		      /* FERRY__RDMA_VERSION */
	uint16_t recv_depth;		      /* receives the sender posts: the peer's credits */
	uint32_t msg_size;		      /* bytes per receive buffer */
	uint8_t token_len;		      /* token bytes, 0xff for a digest */
	uint8_t reserved[3];		      /* zero */
	uint8_t token[FERRY__RDMA_TOKEN_MAX]; /* cluster token */
};
_Static_assert(sizeof(struct hello) == FERRY__RDMA_HELLO_BYTES, "IB connect data holds 56 bytes");

struct welcome {
	uint32_t magic;	      /* RDMA_MAGIC */
	uint16_t version;     /* FERRY__RDMA_VERSION */
	uint16_t recv_depth;  /* receives the acceptor posts */
	uint32_t msg_size;    /* bytes per receive buffer */
	uint32_t region_rkey; /* the acceptor's region: its key, */
	uint64_t region_addr; /* its start (0: none), */
	uint64_t region_len;  /* and its length */
};
_Static_assert(sizeof(struct welcome) == FERRY__RDMA_WELCOME_BYTES, "welcome has no padding");

struct refusal {
	uint32_t magic;	   /* RDMA_MAGIC */
	uint16_t version;  /* FERRY__RDMA_VERSION */
	uint16_t reserved; /* zero */
	int32_t error;	   /* positive errno */
};
_Static_assert(sizeof(struct refusal) == FERRY__RDMA_REFUSAL_BYTES, "refusal has no padding");

/* The fields every message starts with, and the terms both hello and welcome carry. */
static int read_terms(uint32_t magic, uint16_t version, uint16_t recv_depth, uint32_t msg_size,
		      struct ferry__rdma_terms *t)
{
	if (ntohl(magic) != RDMA_MAGIC || ntohs(version) != FERRY__RDMA_VERSION ||
	    ntohs(recv_depth) < 4 || ntohl(msg_size) < 64)
		return -EPROTO;
	memset(t, 0, sizeof(*t));
	t->recv_depth = ntohs(recv_depth);
	t->msg_size = ntohl(msg_size);
	return 0;
}

void ferry__rdma_hello_write(void *buf, const struct ferry__rdma_terms *t, uint8_t token_len,
			     const uint8_t *token)
{
	struct hello h;

	memset(&h, 0, sizeof(h));
	h.magic = htonl(RDMA_MAGIC);
	h.version = htons(FERRY__RDMA_VERSION);
	h.recv_depth = htons(t->recv_depth);
	h.msg_size = htonl(t->msg_size);
	h.token_len = token_len;
	memcpy(h.token, token, sizeof(h.token));
	memcpy(buf, &h, sizeof(h));
}

int ferry__rdma_hello_read(const void *buf, size_t len, uint8_t token_len, const uint8_t *token,
			   struct ferry__rdma_terms *t)
{
	struct hello h;
	unsigned diff;
	int ret;

	if (len < sizeof(h))
		return -EPROTO;
	memcpy(&h, buf, sizeof(h));
	ret = read_terms(h.magic, h.version, h.recv_depth, h.msg_size, t);
	if (ret < 0)
		return ret;
	/* Constant time over the whole field, whatever the lengths. */
	diff = h.token_len ^ token_len;
	for (size_t i = 0; i < sizeof(h.token); i++)
		diff |= (unsigned)(h.token[i] ^ token[i]);
	return diff ? -EACCES : 0;
}

void ferry__rdma_welcome_write(void *buf, const struct ferry__rdma_terms *t)
{
	struct welcome w = {
		.magic = htonl(RDMA_MAGIC),
		.version = htons(FERRY__RDMA_VERSION),
		.recv_depth = htons(t->recv_depth),
		.msg_size = htonl(t->msg_size),
		.region_rkey = htonl(t->region_rkey),
		.region_addr = htobe64(t->region_addr),
		.region_len = htobe64(t->region_len),
	};

	memcpy(buf, &w, sizeof(w));
}

int ferry__rdma_welcome_read(const void *buf, size_t len, struct ferry__rdma_terms *t)
{
	struct welcome w;
	int ret;

	if (len < sizeof(w))
		return -EPROTO;
	memcpy(&w, buf, sizeof(w));
	ret = read_terms(w.magic, w.version, w.recv_depth, w.msg_size, t);
	if (ret < 0)
		return ret;
	t->region_addr = be64toh(w.region_addr);
	t->region_len = be64toh(w.region_len);
	t->region_rkey = ntohl(w.region_rkey);
	/* An address range that wraps names no memory: READs from it could only fail. */
	if (!t->region_addr || !t->region_len || t->region_len > UINT64_MAX - t->region_addr)
		t->region_addr = t->region_len = t->region_rkey = 0;
	return 0;
}

void ferry__rdma_refusal_write(void *buf, int err)
{
	struct refusal r = {
		.magic = htonl(RDMA_MAGIC),
		.version = htons(FERRY__RDMA_VERSION),
		.error = (int32_t)htonl((uint32_t)-err),
	};

	memcpy(buf, &r, sizeof(r));
}

int ferry__rdma_refusal_read(const void *buf, size_t len)
{
	struct refusal r;
	int err;

	if (len < sizeof(r))
		return -ECONNREFUSED;
	memcpy(&r, buf, sizeof(r));
	if (ntohl(r.magic) != RDMA_MAGIC)
		return -ECONNREFUSED;
	err = (int)ntohl((uint32_t)r.error);
	/* Our own refusals: bad token/version are the caller's to see. */
	return err == EACCES || err == EPROTO ? -err : -ECONNREFUSED;
}
