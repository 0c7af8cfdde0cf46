// vwt: Variable-Width Transformers (the "><former", arXiv 2606.18246), header-only C++20.
// The one include for users: schedules, the solver, presets and cost accounting.
#pragma once

#include "accounting.hpp"
#include "error.hpp"
#include "schedule/generate.hpp"
#include "schedule/presets.hpp"
#include "schedule/schedule.hpp"
#include "schedule/solver.hpp"
#include "version.hpp"
#include "backend/cpu/backend.hpp"
#include "infer/generate.hpp"
#include "infer/kv_cache.hpp"
#include "infer/sampling.hpp"
#include "io/byte_tokenizer.hpp"
#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"
#include "model.hpp"
#include "model_config.hpp"
#include "parameters.hpp"
#include "residual_view.hpp"
