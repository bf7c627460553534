/* SPDX-License-Identifier: Apache-2.0 */
/* A job's code whose worker setup fails (test_worker.c): the worker must refuse the job and
 * name the setup function and its message. */
#include <errno.h>

#include <ferry/runtime.h>

FERRY_WORKER_SETUP(broken_setup)
{
	ferry_task_error(NULL, "no GPU here");
	return -ENODEV;
}

FERRY_FUNCTION(never)
{
	(void)ctx;
	return 0;
}
