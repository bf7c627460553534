/* SPDX-License-Identifier: Apache-2.0 */
/* Message verification by type, the handshake check and message names (see wire.h). */
#include <errno.h>

#include "common/log.h"
#include "common/wire.h"

int ferry__wire_verify(uint16_t type, const void *payload, size_t len)
{
	const struct ferry__fb_message_info *info = ferry__wire_message_info(type);

	if (!info) {
		FLOG_WARN("wire", "message of unknown type %u", type);
		return -EPROTO;
	}
	if (info->verify(payload, len)) {
		FLOG_WARN("wire", "malformed %s message (%zu bytes)", info->name, len);
		return -EPROTO;
	}
	return 0;
}

const char *ferry__wire_message_name(uint16_t type)
{
	const struct ferry__fb_message_info *info = ferry__wire_message_info(type);

	return info ? info->name : "unknown";
}

/* No early exit: the loop always runs over the longer input. */
int ferry__wire_bytes_equal(const void *a, size_t a_len, const void *b, size_t b_len)
{
	const volatile uint8_t *x = a, *y = b;
	size_t n = a_len > b_len ? a_len : b_len;
	uint8_t diff = a_len != b_len;

	for (size_t i = 0; i < n; i++) {
		uint8_t u = i < a_len ? x[i] : 0;
		uint8_t w = i < b_len ? y[i] : 0;

		diff |= u ^ w;
	}
	return diff == 0;
}

int ferry__wire_check_handshake(const void *payload, size_t len, const void *token,
				size_t token_len, uint32_t version)
{
	struct ferry__wire_handshake_view hs;
	uint32_t got_version;
	uint8_t kind;

	if (ferry__wire_handshake_root(payload, len, &hs)) {
		FLOG_WARN("wire", "handshake: malformed (%zu bytes)", len);
		return -EPROTO;
	}
	got_version = ferry__wire_handshake_protocol_version(hs);
	kind = ferry__wire_handshake_peer_kind(hs);
	if (got_version != version) {
		FLOG_WARN("wire", "handshake: protocol version %u, this side speaks %u",
			  got_version, version);
		return -EPROTO;
	}
	if (!ferry__wire_peer_kind_name(kind)) {
		FLOG_WARN("wire", "handshake: unknown peer kind %u", kind);
		return -EPROTO;
	}
	if (!ferry__wire_bytes_equal(ferry__wire_handshake_token_data(hs),
				     ferry__wire_handshake_token_count(hs), token, token_len)) {
		FLOG_WARN("wire", "handshake: wrong cluster token from a %s (pid %d)",
			  ferry__wire_peer_kind_name(kind), ferry__wire_handshake_pid(hs));
		return -EACCES;
	}
	return 0;
}
