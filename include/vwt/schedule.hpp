// vwt's light include: width schedules (compile time and run time), the authors' solver, the
// presets and cost accounting, without the model, Eigen or JSON.
#pragma once

#include "accounting.hpp"
#include "error.hpp"
#include "schedule/generate.hpp"
#include "schedule/presets.hpp"
#include "schedule/schedule.hpp"
#include "schedule/solver.hpp"
#include "version.hpp"
