/* SPDX-License-Identifier: Apache-2.0 */
/* Ferry umbrella header: include this to get the whole public API. */
#ifndef FERRY_FERRY_H
#define FERRY_FERRY_H

#include <ferry/common.h>
#include <ferry/config.h>
#include <ferry/gcs.h>
#include <ferry/id.h>
#include <ferry/plasma.h>
#include <ferry/runtime.h>

#endif
