// Tensor views, owning buffers and the argument checks every public entry shares.
#include "sixfold/runtime/tensor.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "cuda_hooks.hpp"
#include "sixfold/runtime/error.hpp"

namespace sixfold {

std::string to_string(Device d) {
  return d.kind == DeviceKind::cpu ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

Shape::Shape(std::initializer_list<std::int64_t> d) {
  if (d.size() > std::size_t(kMaxRank))
    throw_argument_error("sixfold::Shape", "dims", "at most 8 dimensions",
                         std::to_string(d.size()));
  for (std::int64_t x : d) dims[rank++] = x;
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.dims[i] != b.dims[i]) return false;
  return true;
}

std::string to_string(const Shape& s) {
  std::string r = "[";
  for (int i = 0; i < s.rank; ++i) r += (i ? ", " : "") + std::to_string(s.dims[i]);
  return r + "]";
}

TensorView TensorView::contiguous(void* data, DType dtype, Shape shape, Device device) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.shape = shape;
  v.device = device;
  std::int64_t s = 1;
  for (int i = shape.rank - 1; i >= 0; --i) {
    v.strides[i] = s;
    s *= shape.dims[i];
  }
  return v;
}

bool TensorView::is_contiguous() const {
  if (numel() == 0) return true;  // nothing to address: any strides describe it
  std::int64_t s = 1;
  for (int i = shape.rank - 1; i >= 0; --i) {
    if (shape.dims[i] != 1 && strides[i] != s) return false;
    s *= shape.dims[i];
  }
  return true;
}

namespace check {

void not_null(std::string_view where, std::string_view arg, const TensorView& t) {
  for (int i = 0; i < t.rank(); ++i)
    if (t.shape.dims[i] < 0)
      throw_argument_error(where, arg, "non-negative sizes", to_string(t.shape));
  if (t.data == nullptr && t.numel() != 0)
    throw_argument_error(where, arg, "a non-null data pointer for a tensor with " +
                                         std::to_string(t.numel()) + " elements",
                         "null");
}

void rank(std::string_view where, std::string_view arg, const TensorView& t, int expected) {
  if (t.rank() != expected)
    throw_argument_error(where, arg, "rank " + std::to_string(expected),
                         "rank " + std::to_string(t.rank()) + " with shape " + to_string(t.shape));
}

void dtype(std::string_view where, std::string_view arg, const TensorView& t, DType expected) {
  if (t.dtype != expected)
    throw_argument_error(where, arg, "dtype " + std::string(dtype_name(expected)),
                         std::string(dtype_name(t.dtype)));
}

void same_shape(std::string_view where, std::string_view arg, const TensorView& t,
                std::string_view ref_arg, const TensorView& ref) {
  if (!(t.shape == ref.shape))
    throw_argument_error(where, arg,
                         "shape " + to_string(ref.shape) + " (that of '" + std::string(ref_arg) + "')",
                         to_string(t.shape));
}

void same_device(std::string_view where, std::string_view arg, const TensorView& t,
                 std::string_view ref_arg, const TensorView& ref) {
  if (!(t.device == ref.device))
    throw_argument_error(where, arg,
                         "device " + to_string(ref.device) + " (that of '" + std::string(ref_arg) + "')",
                         to_string(t.device));
}

void contiguous(std::string_view where, std::string_view arg, const TensorView& t) {
  if (!t.is_contiguous())
    throw_argument_error(where, arg, "a contiguous tensor", "non-unit strides");
}

void no_overlap(std::string_view where, std::string_view arg, const TensorView& t,
                std::string_view other_arg, const TensorView& other) {
  if (t.numel() == 0 || other.numel() == 0 || t.data == other.data) return;  // equal: in place
  auto span = [](const TensorView& v) {
    std::int64_t hi = 0;
    for (int i = 0; i < v.rank(); ++i) hi += (v.shape.dims[i] - 1) * v.strides[i];
    auto* b = static_cast<const char*>(v.data);
    return std::pair{b, b + dtype_bytes(v.dtype, hi + 1)};
  };
  auto [a0, a1] = span(t);
  auto [b0, b1] = span(other);
  if (a0 < b1 && b0 < a1)
    throw_argument_error(where, arg,
                         "memory that does not partly overlap '" + std::string(other_arg) +
                             "' (exact aliasing is allowed where documented)",
                         "a partly overlapping buffer");
}

}  // namespace check

std::shared_ptr<void> allocate(Device device, std::int64_t bytes) {
  if (bytes < 0) throw_argument_error("sixfold::allocate", "bytes", "a non-negative size",
                                      std::to_string(bytes));
  if (device.kind == DeviceKind::cuda) return detail::cuda_allocate(device.index, bytes);
  // Large host buffers are aligned to 2 MiB and offered to the kernel as transparent huge pages
  // (where THP is in "madvise" mode, nothing is backed by huge pages unless asked): a stream over
  // hundreds of MB then takes 512× fewer TLB misses, which a virtual machine's nested page
  // walks make expensive.
  constexpr std::size_t kHuge = std::size_t(2) << 20;
  const bool huge = std::size_t(bytes) >= 2 * kHuge;
  const std::size_t align = huge ? kHuge : 64;
  const std::size_t rounded = (std::size_t(bytes) + align - 1) / align * align;
  void* p = rounded ? std::aligned_alloc(align, rounded) : nullptr;
  if (rounded && !p) throw std::bad_alloc();
#if defined(__linux__)
  if (huge) madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure changes nothing
#endif
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device,
                std::int64_t bytes) {
  if (bytes == 0) return;
  if (dst_device.kind == DeviceKind::cpu && src_device.kind == DeviceKind::cpu)
    std::memcpy(dst, src, std::size_t(bytes));
  else
    detail::cuda_copy(dst, src, bytes);
}

Tensor::Tensor(DType dtype, Shape shape, Device device) {
  check::not_null("sixfold::Tensor", "shape", TensorView::contiguous(this, dtype, shape, device));
  storage_ = allocate(device, dtype_bytes(dtype, shape.numel()));
  view_ = TensorView::contiguous(storage_.get(), dtype, shape, device);
}

void synchronize(Device device) {
  if (device.kind == DeviceKind::cuda) detail::cuda_synchronize(device.index);
}

bool cuda_available() { return detail::cuda_backend_built() && detail::cuda_usable(); }

Device device_of_pointer(const void* p) { return detail::cuda_device_of_pointer(p); }

}  // namespace sixfold
