/* SPDX-License-Identifier: MIT */
/*
 * tier.* settings -> the modelled device's figures. tier.model names a
 * preset (each tier.read_ns ... set overrides one of its figures) or
 * `custom` (all four are then required). A latency may be 0; a bandwidth
 * must be more than 0. Messages name the setting.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

static const char *const KEYS[4] = {"tier.read_ns", "tier.write_ns", "tier.read_gbps",
				    "tier.write_gbps"};

int tier_settings(const struct chell_config *cfg, const char **model, struct chell_tier_figures *f,
		  char *err, size_t errlen)
{
	const char *name = chell_config_str(cfg, "tier.model");
	*model = name;
	if (strcmp(name, "none") == 0)
		return 0;
	const struct tier_preset *p = tier_preset_find(name);
	struct chell_tier_figures out = p ? p->f : (struct chell_tier_figures){-1, -1, -1, -1};
	double *v[4] = {&out.read_ns, &out.write_ns, &out.read_gbps, &out.write_gbps};
	for (int i = 0; i < 4; i++) {
		double x = chell_config_num(cfg, KEYS[i]);
		if (x >= 0)
			*v[i] = x;
		if (*v[i] < 0) {
			snprintf(err, errlen, "setting %s is required with tier.model = custom", KEYS[i]);
			return -1;
		}
		if (i >= 2 && *v[i] <= 0) {
			snprintf(err, errlen, "bad value '%s' for setting %s: a bandwidth must be more than 0",
				 chell_config_str(cfg, KEYS[i]), KEYS[i]);
			return -1;
		}
	}
	*f = out;
	return 0;
}
