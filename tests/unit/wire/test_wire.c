/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The wire entry points: verification by message type (unknown types, garbage, a valid
 * payload under the wrong type) and the handshake check (token, version, peer kind,
 * malformed), each refusal with its errno and a log line.
 */
#include <errno.h>
#include <string.h>

#include "common/fb.h"
#include "common/wire.h"
#include "ftest.h"

static const uint8_t token[] = "cluster-secret-0123456789";

static void build_handshake(struct ferry__fb_builder *b, uint32_t version, const void *tok,
			    size_t tok_len, uint8_t kind)
{
	struct ferry__wire_handshake hs = {.protocol_version = version,
					   .token = tok,
					   .token_count = tok_len,
					   .peer_kind = kind,
					   .pid = 1234,
					   .name = "test client"};

	hs.peer_id.bytes[0] = 1;
	ftest_assert_ok(ferry__wire_handshake_build(b, &hs));
}

static int check(struct ferry__fb_builder *b)
{
	return ferry__wire_check_handshake(ferry__fb_builder_data(b), ferry__fb_builder_size(b),
					   token, sizeof(token), FERRY_WIRE_PROTOCOL_VERSION);
}

FTEST(good_handshake_is_accepted)
{
	struct ferry__fb_builder b = {0};

	build_handshake(&b, FERRY_WIRE_PROTOCOL_VERSION, token, sizeof(token),
			FERRY__WIRE_PEER_KIND_PLASMA_CLIENT);
	ftest_assert_ok(check(&b));
	ferry__fb_builder_fini(&b);
}

FTEST(wrong_token_is_eacces_and_logged_without_the_token)
{
	uint8_t wrong[sizeof(token)];
	struct ferry__fb_builder b = {0};

	ftest_log_capture_start();
	memcpy(wrong, token, sizeof(token));
	wrong[sizeof(token) - 1] ^= 1; /* differs in the last byte only */
	build_handshake(&b, FERRY_WIRE_PROTOCOL_VERSION, wrong, sizeof(wrong),
			FERRY__WIRE_PEER_KIND_WORKER);
	ftest_assert_errno(check(&b), -EACCES);
	ftest_assert_true(strstr(ftest_log_captured(), "token") != NULL);
	ftest_assert_true(strstr(ftest_log_captured(), (const char *)token) == NULL);
	/* a prefix, a longer token, an empty one, none at all */
	build_handshake(&b, FERRY_WIRE_PROTOCOL_VERSION, token, sizeof(token) - 1,
			FERRY__WIRE_PEER_KIND_WORKER);
	ftest_assert_errno(check(&b), -EACCES);
	build_handshake(&b, FERRY_WIRE_PROTOCOL_VERSION, "cluster-secret-0123456789-and-more", 35,
			FERRY__WIRE_PEER_KIND_WORKER);
	ftest_assert_errno(check(&b), -EACCES);
	build_handshake(&b, FERRY_WIRE_PROTOCOL_VERSION, token, 0, FERRY__WIRE_PEER_KIND_WORKER);
	ftest_assert_errno(check(&b), -EACCES);
	build_handshake(&b, FERRY_WIRE_PROTOCOL_VERSION, NULL, 0, FERRY__WIRE_PEER_KIND_WORKER);
	ftest_assert_errno(check(&b), -EACCES);
	ftest_log_capture_stop();
	ferry__fb_builder_fini(&b);
}

FTEST(empty_token_matches_only_an_empty_token)
{
	struct ferry__fb_builder b = {0};

	build_handshake(&b, FERRY_WIRE_PROTOCOL_VERSION, NULL, 0, FERRY__WIRE_PEER_KIND_CLI);
	ftest_assert_ok(ferry__wire_check_handshake(ferry__fb_builder_data(&b),
						    ferry__fb_builder_size(&b), "", 0,
						    FERRY_WIRE_PROTOCOL_VERSION));
	ftest_assert_errno(check(&b), -EACCES);
	ferry__fb_builder_fini(&b);
}

FTEST(wrong_protocol_version_is_eproto)
{
	struct ferry__fb_builder b = {0};

	ftest_log_capture_start();
	build_handshake(&b, FERRY_WIRE_PROTOCOL_VERSION + 1, token, sizeof(token),
			FERRY__WIRE_PEER_KIND_NODE);
	ftest_assert_errno(check(&b), -EPROTO);
	ftest_assert_true(strstr(ftest_log_captured(), "protocol version") != NULL);
	build_handshake(&b, 0, token, sizeof(token), FERRY__WIRE_PEER_KIND_NODE);
	ftest_assert_errno(check(&b), -EPROTO);
	ftest_log_capture_stop();
	ferry__fb_builder_fini(&b);
}

FTEST(unknown_peer_kind_is_eproto)
{
	struct ferry__fb_builder b = {0};

	build_handshake(&b, FERRY_WIRE_PROTOCOL_VERSION, token, sizeof(token), 200);
	ftest_assert_errno(check(&b), -EPROTO);
	ferry__fb_builder_fini(&b);
}

FTEST(malformed_handshake_is_eproto)
{
	static const uint8_t junk[64] = {0xff, 0xff, 0xff, 0xff};
	struct ferry__fb_builder b = {0};

	ftest_assert_errno(ferry__wire_check_handshake(junk, sizeof(junk), token, sizeof(token),
						       FERRY_WIRE_PROTOCOL_VERSION),
			   -EPROTO);
	ftest_assert_errno(ferry__wire_check_handshake(NULL, 0, token, sizeof(token),
						       FERRY_WIRE_PROTOCOL_VERSION),
			   -EPROTO);
	build_handshake(&b, FERRY_WIRE_PROTOCOL_VERSION, token, sizeof(token),
			FERRY__WIRE_PEER_KIND_DRIVER);
	for (size_t cut = 0; cut < ferry__fb_builder_size(&b); cut++)
		ftest_assert_errno(ferry__wire_check_handshake(ferry__fb_builder_data(&b), cut,
							       token, sizeof(token),
							       FERRY_WIRE_PROTOCOL_VERSION),
				   -EPROTO);
	ferry__fb_builder_fini(&b);
}

FTEST(verify_by_type_refuses_unknown_types_and_garbage)
{
	static const uint8_t junk[32] = {8, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
	struct ferry__fb_builder b = {0};

	ftest_log_capture_start();
	build_handshake(&b, 1, token, 4, 0);
	ftest_assert_ok(ferry__wire_verify(FERRY__WIRE_MSG_HANDSHAKE, ferry__fb_builder_data(&b),
					   ferry__fb_builder_size(&b)));
	ftest_assert_errno(
		ferry__wire_verify(0, ferry__fb_builder_data(&b), ferry__fb_builder_size(&b)),
		-EPROTO);
	ftest_assert_errno(
		ferry__wire_verify(4242, ferry__fb_builder_data(&b), ferry__fb_builder_size(&b)),
		-EPROTO);
	ftest_assert_true(strstr(ftest_log_captured(), "unknown type 4242") != NULL);
	for (size_t i = 0; i < ferry__wire_message_count; i++) {
		const struct ferry__fb_message_info *m = &ferry__wire_messages[i];

		/* A struct-framed payload is any bytes from its struct's size on: junk is short. */
		ftest_assert_errno(
			ferry__wire_verify(m->type, junk,
					   m->framed_bytes ? m->framed_bytes - 1 : sizeof(junk)),
			-EPROTO);
		if (m->framed_bytes)
			ftest_assert_ok(ferry__wire_verify(m->type, junk, m->framed_bytes));
	}
	ftest_assert_true(strstr(ftest_log_captured(), "malformed") != NULL);
	ftest_log_capture_stop();
	ferry__fb_builder_fini(&b);
}

FTEST(payload_checked_against_the_type_it_claims)
{
	struct ferry__wire_plasma_create create = {.seq = 1};
	struct ferry__fb_builder b = {0};

	ftest_assert_ok(ferry__wire_plasma_create_build(&b, &create));
	/* PlasmaSeal also requires field 1 to be a 20-byte ObjectId: a Create passes for it. */
	ftest_assert_ok(ferry__wire_verify(FERRY__WIRE_MSG_PLASMA_SEAL, ferry__fb_builder_data(&b),
					   ferry__fb_builder_size(&b)));
	/* PlasmaDelete requires field 1 to be a vector: refused. */
	ftest_assert_errno(ferry__wire_verify(FERRY__WIRE_MSG_PLASMA_DELETE,
					      ferry__fb_builder_data(&b),
					      ferry__fb_builder_size(&b)),
			   -EPROTO);
	ferry__fb_builder_fini(&b);
}

FTEST(constant_time_compare_is_a_correct_compare)
{
	ftest_assert_true(ferry__wire_bytes_equal("abc", 3, "abc", 3));
	ftest_assert_false(ferry__wire_bytes_equal("abc", 3, "abd", 3));
	ftest_assert_false(ferry__wire_bytes_equal("abc", 3, "abc\0", 4));
	ftest_assert_false(ferry__wire_bytes_equal("", 0, "a", 1));
	ftest_assert_true(ferry__wire_bytes_equal(NULL, 0, "", 0));
}

FTEST(enum_names_for_logs)
{
	ftest_assert_str_eq(ferry__wire_peer_kind_name(FERRY__WIRE_PEER_KIND_GCS), "Gcs");
	ftest_assert_ptr_null(ferry__wire_peer_kind_name(8));
	ftest_assert_str_eq(ferry__wire_msg_name(FERRY__WIRE_MSG_PLASMA_NOTIFY), "PlasmaNotify");
}
