/* SPDX-License-Identifier: Apache-2.0 */
/* The verbs environment the rdma suite needs: a device that opens and reports an active port. */
#include <infiniband/verbs.h>

#include "ftest.h"

FTEST(device_opens_and_has_active_port)
{
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_port_attr port;
	int count = 0;

	list = ibv_get_device_list(&count);
	if (!list || count == 0) {
		if (list)
			ibv_free_device_list(list);
		ftest_skip("no RDMA device (ibv_get_device_list found none; run the suite through "
			   "tools/softroce-vm, or load rdma_rxe on a kernel that has it)");
	}
	ctx = ibv_open_device(list[0]);
	ftest_assert_ptr_notnull(ctx);
	ftest_assert_int_eq(ibv_query_port(ctx, 1, &port), 0);
	ftest_log("%s: port 1 state %s, mtu %d", ibv_get_device_name(list[0]),
		  ibv_port_state_str(port.state), 128 << port.active_mtu);
	ftest_assert_int_eq(port.state, IBV_PORT_ACTIVE);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
}
