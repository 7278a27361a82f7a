/* DAT return codes.  DAT_ERROR() is not in the public headers. */
#ifndef DFI_DATERR_H
#define DFI_DATERR_H

#include <dat2/udat.h>

/* An error: class bit | type | subtype. */
#define DFI_ERR(type, sub) ((DAT_RETURN)(DAT_CLASS_ERROR | (DAT_UINT32)(type) | (DAT_UINT32)(sub)))
/* "Queue empty" is a normal outcome, returned without the class bit: the stock
 * dtest compares dat_evd_dequeue's result with 0x000d0000 exactly. */
#define DFI_QUEUE_EMPTY ((DAT_RETURN)DAT_QUEUE_EMPTY)

#endif
