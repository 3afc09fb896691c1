// A C++ CPU kernel for torch ops that run autosched's TVM kernels (see graph_call.py).
//
// A compiled model calls each autosched kernel through its `.graph` overload. Served by
// Python, every call crosses from torch's dispatcher into the interpreter, runs the
// kernel selection in Python and comes back: inside a training step, with the caches
// full of the model's own work, that costs tens of microseconds a call, as much as the
// kernels win against torch's operators. This kernel does the same work in C++: find
// the bound kernel whose input shapes and dtypes match, make each input contiguous and
// 64-byte aligned (TVM kernels assume both), allocate the outputs, and call the TVM
// function through the TVM-FFI C API with DLTensor views of the tensors (zero-copy).
// A call it does not serve (no matching kernel, another device) goes to the op's
// fallback overload, whose Python implementation selects, runs the torch reference or
// raises exactly as before; without a fallback it is an error.
#include <ATen/ATen.h>
#include <ATen/core/stack.h>
#include <torch/library.h>
#include <tvm/ffi/c_api.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

struct TensorSpec {
  std::vector<int64_t> shape;
  DLDataType dtype;
  at::ScalarType type;  // torch's name of `dtype`, resolved once when bound
};

struct Kernel {
  std::vector<TensorSpec> inputs, outputs;
  TVMFFIObjectHandle function;  // one reference held while the kernel is bound
};

using Kernels = std::vector<Kernel>;

std::mutex lock;
std::unordered_map<std::string, std::shared_ptr<const Kernels>> bound;  // workload -> kernels
std::vector<std::unique_ptr<torch::Library>> registrations;
std::string last_error;

void release(const Kernels* kernels) {
  for (const Kernel& k : *kernels) TVMFFIObjectDecRef(k.function);
  delete kernels;
}

bool same_dtype(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

bool dl_dtype(at::ScalarType t, DLDataType* out) {
  switch (t) {
    case at::kFloat: *out = {kDLFloat, 32, 1}; return true;
    case at::kDouble: *out = {kDLFloat, 64, 1}; return true;
    case at::kHalf: *out = {kDLFloat, 16, 1}; return true;
    case at::kBFloat16: *out = {kDLBfloat, 16, 1}; return true;
    case at::kInt: *out = {kDLInt, 32, 1}; return true;
    case at::kLong: *out = {kDLInt, 64, 1}; return true;
    case at::kShort: *out = {kDLInt, 16, 1}; return true;
    case at::kChar: *out = {kDLInt, 8, 1}; return true;
    case at::kByte: *out = {kDLUInt, 8, 1}; return true;
    case at::kBool: *out = {kDLBool, 8, 1}; return true;
    default: return false;
  }
}

bool scalar_type(DLDataType d, at::ScalarType* out) {
  const at::ScalarType all[] = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kInt,
                                at::kLong, at::kShort, at::kChar, at::kByte, at::kBool};
  for (at::ScalarType t : all) {
    DLDataType candidate;
    if (dl_dtype(t, &candidate) && same_dtype(candidate, d)) {
      *out = t;
      return true;
    }
  }
  return false;
}

// The bound kernel whose inputs `tensors` match exactly (CPU tensors only); null if none.
const Kernel* match(const Kernels& kernels, const std::vector<at::Tensor>& tensors) {
  for (const Kernel& k : kernels) {
    if (k.inputs.size() != tensors.size()) continue;
    bool ok = true;
    for (size_t i = 0; ok && i < tensors.size(); ++i) {
      const at::Tensor& t = tensors[i];
      DLDataType d;
      ok = t.device().is_cpu() && dl_dtype(t.scalar_type(), &d) &&
           same_dtype(d, k.inputs[i].dtype) && t.sizes().equals(k.inputs[i].shape);
    }
    if (ok) return &k;
  }
  return nullptr;
}

std::string kernel_error(const std::string& workload) {
  TVMFFIObjectHandle error = nullptr;
  TVMFFIErrorMoveFromRaised(&error);
  std::string text = "autosched." + workload + ": the kernel failed";
  if (error != nullptr) {
    TVMFFIErrorCell* cell = TVMFFIErrorGetCellPtr(error);
    text += ": " + std::string(cell->kind.data, cell->kind.size) + ": " +
            std::string(cell->message.data, cell->message.size);
    TVMFFIObjectDecRef(error);
  }
  return text;
}

std::vector<at::Tensor> run(const std::string& workload, const Kernel& k,
                            std::vector<at::Tensor> inputs) {
  std::vector<at::Tensor> outputs;
  outputs.reserve(k.outputs.size());
  for (at::Tensor& t : inputs) {
    if (!t.is_contiguous() || reinterpret_cast<uintptr_t>(t.data_ptr()) % 64 != 0)
      t = t.clone(at::MemoryFormat::Contiguous);
  }
  for (const TensorSpec& spec : k.outputs) {
    outputs.push_back(at::empty(spec.shape, at::TensorOptions().dtype(spec.type)));
  }
  const size_t n = inputs.size() + outputs.size();
  std::vector<DLTensor> views(n);
  std::vector<TVMFFIAny> args(n);
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& t = i < inputs.size() ? inputs[i] : outputs[i - inputs.size()];
    const TensorSpec& spec = i < inputs.size() ? k.inputs[i] : k.outputs[i - inputs.size()];
    DLTensor& v = views[i];
    v.data = t.data_ptr();
    v.device = {kDLCPU, 0};
    v.ndim = static_cast<int32_t>(t.dim());
    v.dtype = spec.dtype;
    v.shape = const_cast<int64_t*>(t.sizes().data());
    v.strides = nullptr;
    v.byte_offset = 0;
    args[i].type_index = kTVMFFIDLTensorPtr;
    args[i].zero_padding = 0;
    args[i].v_ptr = &v;
  }
  TVMFFIAny result;
  result.type_index = kTVMFFINone;
  result.zero_padding = 0;
  result.v_int64 = 0;
  if (TVMFFIFunctionCall(k.function, args.data(), static_cast<int32_t>(n), &result) != 0)
    TORCH_CHECK(false, kernel_error(workload));
  return outputs;
}

class GraphKernel final : public c10::OperatorKernel {
 public:
  GraphKernel(std::string workload, std::string fallback)
      : workload_(std::move(workload)), fallback_(std::move(fallback)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const size_t n_in = op.schema().arguments().size();
    std::shared_ptr<const Kernels> kernels;
    {
      std::lock_guard<std::mutex> guard(lock);
      auto found = bound.find(workload_);
      if (found != bound.end()) kernels = found->second;
    }
    std::vector<at::Tensor> inputs;
    inputs.reserve(n_in);
    for (const c10::IValue& v : torch::jit::last(*stack, n_in)) inputs.push_back(v.toTensor());
    const Kernel* k = kernels ? match(*kernels, inputs) : nullptr;
    if (k == nullptr) {  // the Python implementation decides: reference, or its error
      TORCH_CHECK(!fallback_.empty(), "autosched: no kernel bound to ", workload_,
                  " takes these inputs");
      fallback().callBoxed(stack);
      return;
    }
    torch::jit::drop(*stack, n_in);
    for (at::Tensor& out : run(workload_, *k, std::move(inputs)))
      torch::jit::push(*stack, std::move(out));
  }

 private:
  const c10::OperatorHandle& fallback() {
    if (!fallback_op_)
      fallback_op_ = c10::Dispatcher::singleton().findSchemaOrThrow(fallback_.c_str(), "");
    return *fallback_op_;
  }

  std::string workload_, fallback_;
  std::optional<c10::OperatorHandle> fallback_op_;
};

}  // namespace

extern "C" {

// Make the C++ kernel the CPU kernel of `namespace_::name` (defined already, with no CPU
// kernel): it runs the kernels bound to `workload`, and a call they do not serve goes to
// the op `fallback` ("" for none). 0 on success; else see autosched_graph_error.
int autosched_graph_register(const char* namespace_, const char* name, const char* workload,
                             const char* fallback) {
  try {
    auto library = std::make_unique<torch::Library>(
        torch::Library::IMPL, namespace_, c10::DispatchKey::CPU, "autosched/graph_call.cpp",
        __LINE__);
    library->impl(name, torch::CppFunction::makeFromBoxedFunctor(
                            std::make_unique<GraphKernel>(workload, fallback)));
    std::lock_guard<std::mutex> guard(lock);
    registrations.push_back(std::move(library));
    return 0;
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> guard(lock);
    last_error = e.what();
    return -1;
  }
}

// Bind `count` kernels to `workload` (replacing those bound before). `specs` holds, per
// kernel, the number of inputs, then per input its ndim, dims, DLPack dtype code, bits
// and lanes, then the same for its outputs; `functions` the TVM function handles.
int autosched_graph_bind(const char* workload, int64_t count, const int64_t* specs,
                         void* const* functions) {
  auto read = [&specs](std::vector<TensorSpec>* out) {
    const int64_t n = *specs++;
    for (int64_t i = 0; i < n; ++i) {
      TensorSpec s;
      const int64_t ndim = *specs++;
      s.shape.assign(specs, specs + ndim);
      specs += ndim;
      s.dtype.code = static_cast<uint8_t>(*specs++);
      s.dtype.bits = static_cast<uint8_t>(*specs++);
      s.dtype.lanes = static_cast<uint16_t>(*specs++);
      s.type = at::kFloat;
      scalar_type(s.dtype, &s.type);
      out->push_back(std::move(s));
    }
  };
  auto kernels = new Kernels(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    Kernel& k = (*kernels)[i];
    read(&k.inputs);
    read(&k.outputs);
    k.function = functions[i];
    TVMFFIObjectIncRef(k.function);
  }
  std::shared_ptr<const Kernels> held(kernels, release);
  std::lock_guard<std::mutex> guard(lock);
  bound[workload] = std::move(held);
  return 0;
}

const char* autosched_graph_error() { return last_error.c_str(); }

}  // extern "C"
