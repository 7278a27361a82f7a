/*
 * DFI_HOT: a function of the post and completion paths.  Each goes to
 * .text.hot.dfi, which the linker gathers with the other .text.hot input
 * sections ahead of the rest of .text, so a DTO's path through this
 * library spans three code pages instead of seven.  On the VMs we measure
 * on (page-table isolation without PCID) every system call empties the
 * TLB, and each page touched after it costs a page walk: with the
 * functions gathered, the dequeue that finds a receive took 60-100 ns less
 * and an empty one 40-60 ns less (bench/HISTORY.md, the part at 415d6f2).
 */
#ifndef DFI_UTIL_HOT_H
#define DFI_UTIL_HOT_H

#define DFI_HOT __attribute__((section(".text.hot.dfi")))

#endif
