/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TCP engine, the wire: the common frame header as the engine reads it (which MessageTypes are
 * its own, the cap of each), the DataChunk struct, the handshake frames (TransferHandshake /
 * TransferHandshakeReply of schema/transport.fbs) and the frame-level steps of the handshake
 * that tcp.c runs. See tcp_int.h.
 */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/frame.h"
#include "common/log.h"
#include "common/wire.h"
#include "transport/tcp_int.h"

void ferry__tcp_data_hdr_encode(uint8_t out[FERRY__TCP_DATA_HDR_SIZE], uint64_t xfer,
				uint64_t offset, uint32_t len)
{
	struct ferry__wire_data_chunk c = {.xfer = xfer, .offset = offset};

	ferry__frame_header_encode(out, FERRY__WIRE_MSG_DATA_CHUNK,
				   FERRY__WIRE_DATA_CHUNK_BYTES + len);
	ferry__wire_data_chunk_store(out + FERRY__TCP_HDR_SIZE, &c);
}

/* The engine's kind of @type, with the largest payload it takes; 0 for an unknown type. */
static uint8_t kind_of(uint16_t type, uint32_t max_msg, uint64_t *cap)
{
	switch (type) {
	case FERRY__WIRE_MSG_DATA_CHUNK:
		*cap = (uint64_t)FERRY__WIRE_DATA_CHUNK_BYTES + FERRY__TCP_MAX_CHUNK;
		return FERRY__TCP_DATA;
	case FERRY__WIRE_MSG_TRANSFER_HANDSHAKE:
		*cap = FERRY__TCP_HELLO_MAX;
		return FERRY__TCP_HELLO;
	case FERRY__WIRE_MSG_TRANSFER_HANDSHAKE_REPLY:
		*cap = FERRY__TCP_ACK_MAX;
		return FERRY__TCP_ACK;
	default:
		*cap = max_msg;
		return ferry__wire_message_info(type) ? FERRY__TCP_MSG : 0;
	}
}

int ferry__tcp_hdr_decode(const uint8_t in[FERRY__TCP_HDR_SIZE], uint32_t max_msg,
			  struct ferry__tcp_hdr *out)
{
	struct ferry__tcp_hdr h = {0};
	uint64_t cap;

	if (in[0] != FERRY_FRAME_MAGIC || in[1] != FERRY_FRAME_VERSION)
		return -EPROTONOSUPPORT;
	h.type = ferry__fb_load_u16(in + 2);
	h.len = ferry__fb_load_u32(in + 4);
	h.kind = kind_of(h.type, max_msg, &cap);
	if (!h.kind || h.len > cap)
		return -EPROTO;
	if (h.kind == FERRY__TCP_DATA) {
		if (h.len < FERRY__WIRE_DATA_CHUNK_BYTES)
			return -EPROTO;
		h.len -= FERRY__WIRE_DATA_CHUNK_BYTES;
	}
	*out = h;
	return 0;
}

int ferry__tcp_data_struct_decode(const uint8_t in[FERRY__WIRE_DATA_CHUNK_BYTES],
				  struct ferry__tcp_hdr *h)
{
	struct ferry__wire_data_chunk c = ferry__wire_data_chunk_load(in);

	if (c.offset > UINT64_MAX - h->len)
		return -EPROTO;
	h->xfer = c.xfer;
	h->offset = c.offset;
	return 0;
}

/* The message just built in @b as one frame of @type in a new buffer. */
static int pack(struct ferry__fb_builder *b, uint16_t type, uint8_t **frame, size_t *size)
{
	return ferry__frame_pack(type, ferry__fb_builder_data(b), ferry__fb_builder_size(b), frame,
				 size);
}

int ferry__tcp_hello_frame(const void *token, size_t token_len, uint64_t nonce, unsigned index,
			   unsigned count, uint8_t **frame, size_t *size)
{
	struct ferry__wire_transfer_handshake m = {
		.protocol_version = FERRY_WIRE_PROTOCOL_VERSION,
		.token = token,
		.token_count = token_len,
		.endpoint_nonce = nonce,
		.socket_index = index,
		.socket_count = count,
	};
	struct ferry__fb_builder b;
	int ret;

	ferry__fb_builder_init(&b);
	ret = ferry__wire_transfer_handshake_build(&b, &m);
	if (ret == 0)
		ret = pack(&b, FERRY__WIRE_MSG_TRANSFER_HANDSHAKE, frame, size);
	ferry__fb_builder_fini(&b);
	return ret;
}

int ferry__tcp_hello_parse(const void *payload, size_t len, struct ferry__tcp_hello *out)
{
	struct ferry__wire_transfer_handshake_view v;

	if (ferry__wire_transfer_handshake_root(payload, len, &v))
		return -EPROTO;
	out->version = ferry__wire_transfer_handshake_protocol_version(v);
	out->token = ferry__wire_transfer_handshake_token_data(v);
	out->token_len = ferry__wire_transfer_handshake_token_count(v);
	out->nonce = ferry__wire_transfer_handshake_endpoint_nonce(v);
	out->index = ferry__wire_transfer_handshake_socket_index(v);
	out->count = ferry__wire_transfer_handshake_socket_count(v);
	if (out->token_len > FERRY__TCP_TOKEN_MAX || out->count < 1 ||
	    out->count > FERRY__TCP_MAX_CONNS || out->index >= out->count)
		return -EPROTO;
	return 0;
}

int ferry__tcp_ack_frame(int status, uint8_t **frame, size_t *size)
{
	struct ferry__wire_transfer_handshake_reply m = {
		.status = status,
		.protocol_version = FERRY_WIRE_PROTOCOL_VERSION,
	};
	struct ferry__fb_builder b;
	int ret;

	ferry__fb_builder_init(&b);
	ret = ferry__wire_transfer_handshake_reply_build(&b, &m);
	if (ret == 0)
		ret = pack(&b, FERRY__WIRE_MSG_TRANSFER_HANDSHAKE_REPLY, frame, size);
	ferry__fb_builder_fini(&b);
	return ret;
}

int ferry__tcp_ack_parse(const void *payload, size_t len)
{
	struct ferry__wire_transfer_handshake_reply_view v;
	int32_t status;

	if (ferry__wire_transfer_handshake_reply_root(payload, len, &v))
		return -EPROTO;
	status = ferry__wire_transfer_handshake_reply_status(v);
	return status > 0 || status < -4095 ? -EPROTO : status;
}

/* ---- handshake helpers of tcp.c ---- */

bool ferry__tcp_token_equal(const struct ferry__tcp_ctx *ctx, const uint8_t *t, size_t len)
{
	uint8_t diff = len != ctx->token_size;

	/* Constant time in the token's content: a peer learns nothing from how long we take. */
	for (size_t i = 0; i < len && i < ctx->token_size; i++)
		diff |= t[i] ^ ctx->token[i];
	return diff == 0;
}

/* Queue the TransferHandshakeReply with @status on @sock. 0, -ENOMEM. */
int ferry__tcp_queue_ack(struct tcp_sock *sock, int status)
{
	uint8_t *frame;
	size_t size;
	int ret = ferry__tcp_ack_frame(status, &frame, &size);

	if (ret < 0)
		return ret;
	ret = ferry__tcp_queue_frame(sock, frame, size);
	ferry__free(frame);
	return ret;
}

/*
 * A handshake frame's header is in (@sock->hdr): check it is a frame of @kind and start
 * reading its payload into sock->hello. Returns 1 when the payload is to be read, 0 when it is
 * complete (empty), -EPROTONOSUPPORT (another framing: an older peer) or -EPROTO (another
 * frame or too long), -ENOMEM or an arm error.
 */
int ferry__tcp_handshake_hdr(struct tcp_sock *sock, uint8_t kind)
{
	struct ferry__tcp_hdr *h = &sock->rx_hdr;
	int ret = ferry__tcp_hdr_decode(sock->hdr, sock->ctx->max_msg, h);

	if (ret < 0)
		return ret;
	if (h->kind != kind)
		return -EPROTO;
	sock->rx_state = RX_HELLO;
	sock->rx_got = 0;
	sock->rx_want = h->len;
	if (!h->len)
		return 0;
	sock->hello = ferry__malloc(h->len);
	if (!sock->hello)
		return -ENOMEM;
	ret = ferry__tcp_rx_resume(sock);
	return ret < 0 ? ret : 1;
}

/* Why a handshake frame was refused, for the log. */
const char *ferry__tcp_handshake_why(int err)
{
	if (err == -EPROTONOSUPPORT)
		return "it speaks another protocol version (not a Ferry frame of this version)";
	return err == -EPROTO ? "it did not start with a transfer handshake" : ferry_strerror(err);
}
