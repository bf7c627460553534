/* SPDX-License-Identifier: Apache-2.0 */
/* GcsValueList encoding and verified reading (gcs/values.h). */
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/fb.h"
#include "common/log.h"
#include "gcs/values.h"

int ferry__gcs_values_encode(const struct ferry__gcs_value *v, size_t n, struct ferry__gcs_buf *out)
{
	struct ferry__wire_gcs_value *m = ferry__calloc(n ? n : 1, sizeof(*m));
	struct ferry__wire_gcs_value_list list = {.values = m, .values_count = n};
	struct ferry__fb_builder b;
	struct ferry__gcs_writer w = {out, 0};
	int ret;

	if (!m)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		m[i] = (struct ferry__wire_gcs_value){v[i].found, v[i].data.data, v[i].data.size};
	ferry__fb_builder_init(&b);
	ret = ferry__wire_gcs_value_list_build(&b, &list);
	out->size = 0;
	if (ret == 0) {
		ferry__gcs_put_raw(&w, ferry__fb_builder_data(&b), ferry__fb_builder_size(&b));
		ret = w.err;
	}
	ferry__fb_builder_fini(&b);
	ferry__free(m);
	return ret;
}

int ferry__gcs_values_open(const void *data, size_t size, uint32_t max, const char *what,
			   struct ferry__gcs_values *vl)
{
	memset(vl, 0, sizeof(*vl));
	if (size == 0)
		return 0;
	if (ferry__wire_gcs_value_list_root(data, size, &vl->view) < 0) {
		FLOG_WARN("gcs", "%s: not a GcsValueList (%zu bytes)", what, size);
		return -EPROTO;
	}
	vl->count = ferry__wire_gcs_value_list_values_count(vl->view);
	if (vl->count > max) {
		FLOG_WARN("gcs", "%s: %u entries, at most %u", what, vl->count, max);
		return -EPROTO;
	}
	return 0;
}

struct ferry__gcs_value ferry__gcs_values_at(const struct ferry__gcs_values *vl, uint32_t i)
{
	struct ferry__wire_gcs_value_view v = ferry__wire_gcs_value_list_values_at(vl->view, i);

	return (struct ferry__gcs_value){
		{ferry__wire_gcs_value_data_data(v), ferry__wire_gcs_value_data_count(v)},
		ferry__wire_gcs_value_found(v)};
}
