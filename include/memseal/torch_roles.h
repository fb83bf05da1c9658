// Names a libtorch model's and optimizer's tensors for explainPeak (header-only, so memseal itself
// needs no libtorch C++ API headers): parameters and buffers, their .grad, and the state of the
// optimizers libtorch ships (Adam, AdamW, SGD, RMSprop, Adagrad).
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include "memseal/explain.h"

namespace memseal {

inline void addOptimizerState(const torch::optim::OptimizerParamState& state,
                              std::vector<at::Tensor>& out) {
  auto add = [&out](const at::Tensor& tensor) {
    if (tensor.defined()) out.push_back(tensor);
  };
  if (auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(&state)) {
    add(adam->exp_avg());
    add(adam->exp_avg_sq());
    add(adam->max_exp_avg_sq());
  } else if (auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(&state)) {
    add(adamw->exp_avg());
    add(adamw->exp_avg_sq());
    add(adamw->max_exp_avg_sq());
  } else if (auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(&state)) {
    add(sgd->momentum_buffer());
  } else if (auto* rmsprop = dynamic_cast<const torch::optim::RMSpropParamState*>(&state)) {
    add(rmsprop->square_avg());
    add(rmsprop->momentum_buffer());
    add(rmsprop->grad_avg());
  } else if (auto* adagrad = dynamic_cast<const torch::optim::AdagradParamState*>(&state)) {
    add(adagrad->sum());
  }
}

// Fills `roles` from a model and (optionally) its optimizer.
inline void addRoles(RoleTensors& roles, const torch::nn::Module& model,
                     const torch::optim::Optimizer* optimizer = nullptr) {
  for (const at::Tensor& parameter : model.parameters()) {
    roles.parameters.push_back(parameter);
    if (parameter.grad().defined()) roles.gradients.push_back(parameter.grad());
  }
  for (const at::Tensor& buffer : model.buffers()) roles.parameters.push_back(buffer);
  if (optimizer == nullptr) return;
  for (const auto& [key, state] : optimizer->state()) {
    if (state) addOptimizerState(*state, roles.optimizer_state);
  }
}

inline RoleTensors rolesOf(const torch::nn::Module& model,
                           const torch::optim::Optimizer* optimizer = nullptr) {
  RoleTensors roles;
  addRoles(roles, model, optimizer);
  return roles;
}

}  // namespace memseal
