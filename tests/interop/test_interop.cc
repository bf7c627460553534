// SPDX-License-Identifier: Apache-2.0
// Interop with flatc: every table of the real schemas and of the test schema, built by the C
// codec and verified and read field by field by flatc-generated C++, and built by flatc's
// FlatBufferBuilder and verified and read by the C codec. Plus two messages written out by
// hand on the C++ side, independent of fbsgen's generated checks.
#include <flatbuffers/flatbuffers.h>

#include <cstring>
#include <vector>

#include "common/fb.h"
#include "common/wire.h"
#include "ferry_schema_interop.h"
#include "ftest.h"
#include "schema/ferry_schema_testgen.h"
#include "wt_schema_interop.h"
#include "wt_schema_testgen.h"

namespace
{

constexpr uint32_t kSeeds = 150;

struct space {
	alignas(16) uint8_t value[4096];   // one value struct
	alignas(16) uint8_t pool[1 << 20]; // what it points to
};
space sp;

// One table, one seed, both directions. Table is P_test_table, Ops is the interop table_ops.
template <typename Table, typename Pool, typename Ops>
void both_ways(const Table &t, const Ops &ops, uint32_t seed, ferry__fb_builder *b)
{
	Pool pool = {sp.pool, sizeof(sp.pool), 0};
	const char *bad;

	ftest_assert_str_eq(t.name, ops.name);
	ftest_assert_uint_le(t.value_size, sizeof(sp.value));
	ftest_assert_ok(t.sample(&pool, seed, sp.value));

	// C -> C++
	ftest_assert_ok(t.build(b, sp.value));
	if (!ops.verify(ferry__fb_builder_data(b), ferry__fb_builder_size(b)))
		FTEST__FAIL("%s seed %u: flatbuffers::Verifier refuses the C codec's buffer",
			    t.name, seed);
	bad = ops.check(ferry__fb_builder_data(b), sp.value);
	if (bad)
		FTEST__FAIL("%s seed %u: C++ reads %s differently", t.name, seed, bad);

	// C++ -> C
	flatbuffers::FlatBufferBuilder fbb;
	ops.build(fbb, sp.value);
	ftest_assert_true(ops.verify(fbb.GetBufferPointer(), fbb.GetSize()));
	if (t.verify(fbb.GetBufferPointer(), fbb.GetSize()))
		FTEST__FAIL("%s seed %u: the C verifier refuses flatc's buffer", t.name, seed);
	bad = t.check(fbb.GetBufferPointer(), sp.value);
	if (bad)
		FTEST__FAIL("%s seed %u: C reads %s differently", t.name, seed, bad);
}

} // namespace

FTEST(every_message_both_ways)
{
	ferry__fb_builder b;

	ferry__fb_builder_init(&b);
	ftest_assert_uint_eq(ferry__wire_test_table_count, ferry__wire_interop::table_count);
	for (size_t i = 0; i < ferry__wire_test_table_count; i++)
		for (uint32_t seed = 0; seed < kSeeds; seed++)
			both_ways<ferry__wire_test_table, ferry__wire_test_pool>(
				ferry__wire_test_tables[i], ferry__wire_interop::tables[i], seed,
				&b);
	ferry__fb_builder_fini(&b);
}

FTEST(every_test_schema_table_both_ways)
{
	ferry__fb_builder b;

	ferry__fb_builder_init(&b);
	ftest_assert_uint_eq(wt_test_table_count, wt_interop::table_count);
	for (size_t i = 0; i < wt_test_table_count; i++)
		for (uint32_t seed = 0; seed < kSeeds; seed++)
			both_ways<wt_test_table, wt_test_pool>(wt_test_tables[i],
							       wt_interop::tables[i], seed, &b);
	ferry__fb_builder_fini(&b);
}

FTEST(handshake_written_by_hand_in_cpp_is_accepted_by_c)
{
	namespace w = ferry::wire;
	static const uint8_t token[] = {1, 2, 3, 4, 5};
	flatbuffers::FlatBufferBuilder fbb;
	w::UniqueId peer;

	peer.mutable_bytes()->Mutate(3, 0x33);
	fbb.Finish(w::CreateHandshake(
		fbb, FERRY_WIRE_PROTOCOL_VERSION, fbb.CreateVector(token, sizeof(token)),
		w::PeerKind_PlasmaClient, &peer, 4242, fbb.CreateString("hand-made")));
	ftest_assert_ok(ferry__wire_verify(FERRY__WIRE_MSG_HANDSHAKE, fbb.GetBufferPointer(),
					   fbb.GetSize()));
	ftest_assert_ok(ferry__wire_check_handshake(fbb.GetBufferPointer(), fbb.GetSize(), token,
						    sizeof(token), FERRY_WIRE_PROTOCOL_VERSION));
	auto v = ferry__wire_handshake_root_verified(fbb.GetBufferPointer());
	ftest_assert_uint_eq(ferry__wire_handshake_peer_kind(v),
			     FERRY__WIRE_PEER_KIND_PLASMA_CLIENT);
	ftest_assert_uint_eq(ferry__wire_handshake_peer_id(v).bytes[3], 0x33);
	ftest_assert_int_eq(ferry__wire_handshake_pid(v), 4242);
	ftest_assert_str_eq(ferry__wire_handshake_name(v), "hand-made");
}

FTEST(get_reply_built_in_c_is_read_by_hand_in_cpp)
{
	namespace w = ferry::wire;
	ferry__wire_plasma_object objs[2];
	ferry__wire_plasma_get_reply rep;
	ferry__fb_builder b;

	std::memset(objs, 0, sizeof(objs));
	std::memset(&rep, 0, sizeof(rep));
	objs[0].offset = 64;
	objs[0].data_size = 1000;
	objs[0].object_id.bytes[19] = 0x99;
	objs[1].status = -ETIMEDOUT;
	rep.seq = 12;
	rep.objects = objs;
	rep.objects_count = 2;
	ferry__fb_builder_init(&b);
	ftest_assert_ok(ferry__wire_plasma_get_reply_build(&b, &rep));

	flatbuffers::Verifier verifier(ferry__fb_builder_data(&b), ferry__fb_builder_size(&b));
	ftest_assert_true(verifier.VerifyBuffer<w::PlasmaGetReply>(nullptr));
	auto r = flatbuffers::GetRoot<w::PlasmaGetReply>(ferry__fb_builder_data(&b));
	ftest_assert_uint_eq(r->seq(), 12);
	ftest_assert_uint_eq(r->objects()->size(), 2);
	ftest_assert_uint_eq(r->objects()->Get(0)->offset(), 64);
	ftest_assert_uint_eq(r->objects()->Get(0)->data_size(), 1000);
	ftest_assert_uint_eq(r->objects()->Get(0)->object_id()->bytes()->Get(19), 0x99);
	ftest_assert_int_eq(r->objects()->Get(1)->status(), -ETIMEDOUT);
	ferry__fb_builder_fini(&b);
}
