/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object manager's RDMA side in a build without libibverbs/librdmacm: there is never a
 * device, so an RDMA transport that was asked for is refused (or dropped when optional).
 */
#include <errno.h>

#include "transport/objmgr_int.h"

int ferry__objmgr_rdma_start(struct ferry__objmgr *om)
{
	(void)om;
	return -ENODEV;
}

int ferry__objmgr_rdma_pull(struct ferry__objmgr *om, const struct ferry__node_addr *a,
			    const struct ferry_object_id *id,
			    const struct ferry__objmgr_sizes *sizes, uint64_t *bytes)
{
	(void)om, (void)a, (void)id, (void)sizes, (void)bytes;
	return -EHOSTUNREACH;
}

bool ferry__objmgr_rdma_fast_start(struct ferry__objmgr *om, struct ferry__objmgr_pull *p,
				   const struct ferry__node_addr *a)
{
	(void)om, (void)p, (void)a;
	return false;
}

bool ferry__objmgr_rdma_big_start(struct ferry__objmgr *om, struct ferry__objmgr_pull *p,
				  const struct ferry__node_addr *a)
{
	(void)om, (void)p, (void)a;
	return false;
}

void ferry__objmgr_rdma_big_create(struct ferry__objmgr *om, struct ferry__objmgr_pull *p)
{
	(void)om, (void)p; /* never queued: big_start never starts one */
}

const char *ferry__objmgr_rdma_device(const struct ferry__objmgr *om)
{
	(void)om;
	return NULL;
}

void ferry__objmgr_rdma_shutdown(struct ferry__objmgr *om)
{
	(void)om;
}

int ferry__objmgr_rdma_spin_poll(struct ferry__objmgr *om, bool sleeping)
{
	(void)om;
	(void)sleeping;
	return 0;
}

void ferry__objmgr_rdma_free(struct ferry__objmgr *om)
{
	(void)om;
}

int ferry__objmgr_rdma_inject_fault(struct ferry__objmgr *om, int fault, unsigned nth)
{
	(void)om, (void)fault, (void)nth;
	return -ENODEV;
}
