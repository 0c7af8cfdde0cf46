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
