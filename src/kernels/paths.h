// Entry points of the attention paths, one file each (see dispatch.h for which serves what).
// Each runs one item of a call whose Job carries the kernel SelectAttentionKernel chose; it
// writes the item's partials as RunItemOn (dispatch.h) describes and returns false only when
// it has no kernel for the job. The driver calls them through the path table (dispatch.cc);
// no path calls another. Internal to src/kernels; thread-safe (items only read the view and
// the queries).
#pragma once

#include "kernels/job.h"

namespace kvtier::attn {

bool RunItemInt8(const Job& job, const Item& item, float* partial);     // attention_int8.cc
bool RunItemQ16(const Job& job, const Item& item, float* partial);      // attention_q16.cc
bool RunItemFast(const Job& job, const Item& item, float* partial);     // attention_fast.cc
bool RunItemPrefill(const Job& job, const Item& item, float* partial);  // attention_prefill.cc
bool RunItemGeneric(const Job& job, const Item& item, float* partial);  // attention_generic.cc

}  // namespace kvtier::attn
