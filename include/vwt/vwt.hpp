// vwt: Variable-Width Transformers (the "><former", arXiv 2606.18246), header-only C++20.
// The one include for users: schedules, accounting, the policies, layers, models, inference,
// training and file formats. <vwt/schedule.hpp> is the light one (schedules and accounting only).
#pragma once

#include "schedule.hpp"

#include "backend/cpu/backend.hpp"
#include "backend/policy.hpp"
#include "backend/reference/backend.hpp"
#include "infer/generate.hpp"
#include "infer/kv_cache.hpp"
#include "infer/sampling.hpp"
#include "infer/session.hpp"
#include "infer/workspace.hpp"
#include "io/byte_tokenizer.hpp"
#include "io/checkpoint.hpp"
#include "io/config.hpp"
#include "io/json.hpp"
#include "io/load_model.hpp"
#include "io/mapped_file.hpp"
#include "io/safetensors.hpp"
#include "io/token_ids.hpp"
#include "model/config.hpp"
#include "model/model.hpp"
#include "params/init.hpp"
#include "params/layout.hpp"
#include "tensor/weight_format.hpp"
#include "tensor/residual.hpp"
#include "tensor/view.hpp"
