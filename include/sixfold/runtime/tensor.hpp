// sixfold/runtime/tensor.hpp — non-owning tensor views and owning buffers.
//
// A TensorView is (data, dtype, shape, strides, device). Strides count elements and are 64-bit,
// so views of more than 2^31 elements and negative-free arbitrary layouts (BHLD and BLHD alike)
// are described without copies. A view never owns memory; a Tensor owns host or device memory
// and hands out views. Ops read the device from their views: host memory runs on the CPU
// backend, CUDA memory on the CUDA backend, and a call that mixes them is an error.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "sixfold/runtime/dtype.hpp"

namespace sixfold {

enum class DeviceKind : std::uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static constexpr Device cpu() { return {DeviceKind::cpu, 0}; }
  static constexpr Device cuda(int i = 0) { return {DeviceKind::cuda, i}; }
  friend constexpr bool operator==(Device a, Device b) {
    return a.kind == b.kind && a.index == b.index;
  }
};

std::string to_string(Device d);  // "cpu", "cuda:0"

// A CUDA stream as an opaque handle, so public headers need no CUDA include.
// The default (null) is the legacy default stream; CPU ops ignore it.
struct Stream {
  void* handle = nullptr;
};

inline constexpr int kMaxRank = 8;

struct Shape {
  int rank = 0;
  std::array<std::int64_t, kMaxRank> dims{};

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> d);
  std::int64_t operator[](int i) const { return dims[i]; }
  std::int64_t numel() const;
  friend bool operator==(const Shape& a, const Shape& b);
};

std::string to_string(const Shape& s);  // "[2, 3, 4]"

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  std::array<std::int64_t, kMaxRank> strides{};  // in elements
  Device device;

  // A view with row-major contiguous strides.
  static TensorView contiguous(void* data, DType dtype, Shape shape, Device device = Device::cpu());

  int rank() const { return shape.rank; }
  std::int64_t numel() const { return shape.numel(); }
  bool is_contiguous() const;
  std::int64_t stride(int i) const { return strides[i]; }
  std::int64_t size(int i) const { return shape.dims[i]; }

  template <class T> T* data_as() const { return static_cast<T*>(data); }
};

// Validation helpers shared by every public entry. `where` is the entry's name
// ("sixfold::inclusive_scan"), `arg` the argument's name as the user wrote it.
namespace check {
void not_null(std::string_view where, std::string_view arg, const TensorView& t);
void rank(std::string_view where, std::string_view arg, const TensorView& t, int expected);
void dtype(std::string_view where, std::string_view arg, const TensorView& t, DType expected);
void same_shape(std::string_view where, std::string_view arg, const TensorView& t,
                std::string_view ref_arg, const TensorView& ref);
void same_device(std::string_view where, std::string_view arg, const TensorView& t,
                 std::string_view ref_arg, const TensorView& ref);
void contiguous(std::string_view where, std::string_view arg, const TensorView& t);
void no_overlap(std::string_view where, std::string_view arg, const TensorView& t,
                std::string_view other_arg, const TensorView& other);
}  // namespace check

// Owning, 64-byte aligned host memory or cudaMalloc'ed device memory.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape, Device device = Device::cpu());
  TensorView view() const { return view_; }
  operator TensorView() const { return view_; }
  void* data() const { return view_.data; }
  template <class T> T* data_as() const { return static_cast<T*>(view_.data); }
  std::int64_t bytes() const { return dtype_bytes(view_.dtype, view_.numel()); }

 private:
  std::shared_ptr<void> storage_;
  TensorView view_;
};

// Raw allocations behind Tensor, usable by tools and tests.
std::shared_ptr<void> allocate(Device device, std::int64_t bytes);
// Copies bytes between any two places (host or device); synchronous.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device,
                std::int64_t bytes);

// Waits until all work queued on `device` has finished (no-op for the CPU). For tools and
// tests; ops themselves never synchronize.
void synchronize(Device device);

// True when this build has the CUDA backend and a CUDA device is usable now.
bool cuda_available();
// The device a pointer lives on, asked of the CUDA driver when the backend is built
// (host pointers, and every pointer in a CPU-only build, report Device::cpu()).
Device device_of_pointer(const void* p);

}  // namespace sixfold
