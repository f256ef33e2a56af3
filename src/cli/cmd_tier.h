/* SPDX-License-Identifier: MIT */
#ifndef CHELL_CMD_TIER_H
#define CHELL_CMD_TIER_H
int cmd_tier_run(int argc, char **argv);
int cmd_tier_stat(int argc, char **argv);
#endif
