/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the RDMA handshake's decoders (transport/rdma_hs.c): the private data of
 * a connect request, an accept and a reject, as a peer sends them, untrusted. The first byte
 * says which ('H' hello, 'W' welcome, 'R' refusal; anything else: all three on the rest). What
 * a decoder accepts must encode and decode back to the same terms; a welcome's region is
 * either none or a range that does not wrap; a refusal decodes to one of three errors.
 *
 * Built with FUZZ_RDMA_REPLAY and replay.c, it replays its corpus (suite fuzz):
 *   fuzz_rdma_replay DIR|FILE...        run each input
 *   fuzz_rdma_replay --make-corpus DIR  write the seed inputs (ninja -C BUILD rdma-corpus)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/rdma_hs.h"

#include "fuzz_replay.h"

static const uint8_t token[FERRY__RDMA_TOKEN_MAX] = "cluster-token";
#define TOKEN_LEN 13

static void same_terms(const struct ferry__rdma_terms *a, const struct ferry__rdma_terms *b)
{
	if (a->recv_depth != b->recv_depth || a->msg_size != b->msg_size ||
	    a->region_rkey != b->region_rkey || a->region_addr != b->region_addr ||
	    a->region_len != b->region_len)
		abort();
}

static void hello(const uint8_t *data, size_t size)
{
	uint8_t buf[FERRY__RDMA_HELLO_BYTES];
	struct ferry__rdma_terms t, again;
	int ret = ferry__rdma_hello_read(data, size, TOKEN_LEN, token, &t);

	if (ret != 0 && ret != -EPROTO && ret != -EACCES)
		abort();
	if (ret < 0)
		return;
	if (t.recv_depth < 4 || t.msg_size < 64 || t.region_addr || t.region_len || t.region_rkey)
		abort();
	ferry__rdma_hello_write(buf, &t, TOKEN_LEN, token);
	if (ferry__rdma_hello_read(buf, sizeof(buf), TOKEN_LEN, token, &again) != 0)
		abort();
	same_terms(&t, &again);
}

static void welcome(const uint8_t *data, size_t size)
{
	uint8_t buf[FERRY__RDMA_WELCOME_BYTES];
	struct ferry__rdma_terms t, again;
	int ret = ferry__rdma_welcome_read(data, size, &t);

	if (ret != 0 && ret != -EPROTO)
		abort();
	if (ret < 0)
		return;
	if (t.recv_depth < 4 || t.msg_size < 64)
		abort();
	if (t.region_addr ? !t.region_len || t.region_len > UINT64_MAX - t.region_addr
			  : t.region_len || t.region_rkey)
		abort(); /* a region is none, or memory a READ can name */
	ferry__rdma_welcome_write(buf, &t);
	if (ferry__rdma_welcome_read(buf, sizeof(buf), &again) != 0)
		abort();
	same_terms(&t, &again);
}

static void refusal(const uint8_t *data, size_t size)
{
	int ret = ferry__rdma_refusal_read(data, size);

	if (ret != -EACCES && ret != -EPROTO && ret != -ECONNREFUSED)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	switch (data[0]) {
	case 'H':
		hello(data + 1, size - 1);
		break;
	case 'W':
		welcome(data + 1, size - 1);
		break;
	case 'R':
		refusal(data + 1, size - 1);
		break;
	default:
		hello(data + 1, size - 1);
		welcome(data + 1, size - 1);
		refusal(data + 1, size - 1);
	}
	return 0;
}

#ifdef FUZZ_RDMA_REPLAY

/* ---- seeds ---- */

static int write_seed(const char *dir, const char *name, char kind, const void *bytes, size_t len)
{
	return fuzz_write_seed(dir, name, &kind, 1, bytes, len);
}

int fuzz_make_corpus(const char *dir)
{
	static const uint8_t other[FERRY__RDMA_TOKEN_MAX] = "another-token";
	struct ferry__rdma_terms t = {.recv_depth = 64, .msg_size = 4096};
	uint8_t h[FERRY__RDMA_HELLO_BYTES], w[FERRY__RDMA_WELCOME_BYTES] = {0};
	uint8_t r[FERRY__RDMA_REFUSAL_BYTES];
	int bad = 0;

	ferry__rdma_hello_write(h, &t, TOKEN_LEN, token);
	bad |= write_seed(dir, "seed-hello", 'H', h, sizeof(h));
	bad |= write_seed(dir, "seed-hello-short", 'H', h, sizeof(h) - 1);
	ferry__rdma_hello_write(h, &t, TOKEN_LEN, other);
	bad |= write_seed(dir, "seed-hello-other-token", 'H', h, sizeof(h));
	ferry__rdma_hello_write(h, &(struct ferry__rdma_terms){.recv_depth = 3, .msg_size = 4096},
				TOKEN_LEN, token);
	bad |= write_seed(dir, "seed-hello-few-receives", 'H', h, sizeof(h));

	t.region_addr = 0x7f0000000000ull;
	t.region_len = 1ull << 30;
	t.region_rkey = 0x1234;
	ferry__rdma_welcome_write(w, &t);
	bad |= write_seed(dir, "seed-welcome", 'W', w, sizeof(w));
	memset(w + 12, 0, sizeof(w) - 12); /* an acceptor that names no region */
	bad |= write_seed(dir, "seed-welcome-no-region", 'W', w, sizeof(w));
	bad |= write_seed(dir, "seed-welcome-short", 'W', w, 12);
	t.region_addr = UINT64_MAX - 10; /* wraps: read as none */
	ferry__rdma_welcome_write(w, &t);
	bad |= write_seed(dir, "seed-welcome-wrapping-region", 'W', w, sizeof(w));

	ferry__rdma_refusal_write(r, -EACCES);
	bad |= write_seed(dir, "seed-refusal-token", 'R', r, sizeof(r));
	ferry__rdma_refusal_write(r, -ENOMEM);
	bad |= write_seed(dir, "seed-refusal-memory", 'R', r, sizeof(r));
	bad |= write_seed(dir, "seed-all-three", '*', h, sizeof(h));
	return bad;
}

#endif
