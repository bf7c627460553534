/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The wire protocol's entry points: verify a frame's payload by its message type, check a
 * connection's Handshake, name message types for logs. Including this header gives the
 * generated codec for every message too (schema/ferry_schema.h: ferry__wire_<table>_build,
 * _root, field accessors, FERRY__WIRE_MSG_* constants).
 *
 * Typical receive path: the frame parser yields (type, payload, length);
 * ferry__wire_verify() accepts it; the handler switches on type and reads fields through
 * ferry__wire_<table>_root_verified(payload). Send path: fill a struct ferry__wire_<table>,
 * ferry__wire_<table>_build() into a builder, then ferry__frame_finish() or send the payload
 * (ferry__fb_builder_data/_size) with the type.
 *
 * Thread model: all functions are pure (no shared state) and thread-safe.
 */
#ifndef FERRY_COMMON_WIRE_H
#define FERRY_COMMON_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/fb.h"
#include "schema/ferry_schema.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sent in Handshake.protocol_version (and TransferHandshake's); a server refuses any other.
 * 2: every GCS record a versioned GcsRecord and list replies GcsValueList (a peer of version 1
 * would send what this one no longer decodes, so it is refused at the handshake, with a clear
 * reason). 3: the transfer port speaks the common 8-byte frame too (its 24-byte 0xFC header
 * and HELLO/ACK are gone: such a peer is closed with a log line naming the protocol). */
#define FERRY_WIRE_PROTOCOL_VERSION 3

/* 0, or -EPROTO for an unknown type or a payload that is not a valid message of that type
 * (logged). After 0, every field of the payload can be read with the generated accessors. */
int ferry__wire_verify(uint16_t type, const void *payload, size_t len);

/*
 * ferry__wire_check_handshake() - is @payload a Handshake for this server? Returns 0;
 * -EPROTO when it is malformed, its protocol version is not @version, or its peer kind is
 * unknown; -EACCES when its token is not @token (compared in constant time: the time taken
 * does not depend on where the tokens differ). Each refusal is logged, never the token.
 */
int ferry__wire_check_handshake(const void *payload, size_t len, const void *token,
				size_t token_len, uint32_t version);

/* The schema name of @type ("PlasmaGet"), or "unknown" for a type this build does not know. */
const char *ferry__wire_message_name(uint16_t type);

/* Constant-time equality of two byte strings (lengths are not secret). */
int ferry__wire_bytes_equal(const void *a, size_t a_len, const void *b, size_t b_len);

#ifdef __cplusplus
}
#endif
#endif
