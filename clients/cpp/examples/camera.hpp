// The example controller's camera: one uint8 [H, W, 3] frame, allocated once, sent with each
// `obs` as docs/wire.md section 5 describes a frame ({"image": uint8 [H, W, C], "capture_ns"},
// in that order, under the camera's name). The picture is synthetic and never changes: byte
// i of the image is i mod 256, so pixel (r, c, k), at byte (r * W + c) * 3 + k, tells a
// receiver whether it read rows, columns and channels in C order. A real camera fills
// `pixels` from its device and stamps capture_ns when the frame was exposed, on the clock of
// the robot's stamps (CLOCK_MONOTONIC here).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rtinfer/wire.hpp"

namespace rtinfer::example {

class Camera {
  public:
    Camera(std::string name, uint64_t height, uint64_t width)
        : name_(std::move(name)), dims_{height, width, 3}, pixels_(height * width * 3) {
        for (size_t i = 0; i < pixels_.size(); ++i) pixels_[i] = uint8_t(i % 256);
    }

    // A frame taken at capture_ns (the synthetic one is ready at once).
    void capture(int64_t capture_ns) { capture_ns_ = capture_ns; }

    // The obs body's `frames` field: {name: {"image", "capture_ns"}}. It views this camera's
    // name and pixels: keep the camera alive until the message is sent. Arrays of 64 KiB and
    // more go out of band (the Publisher's encoder), as the document's sender should.
    wire::Value frames() const {
        using wire::Value;
        Value image = Value::ndarray(wire::DType::U8, dims_, pixels_.data(), pixels_.size());
        Value frame = Value::object({{Value::str("image"), image},
                                     {Value::str("capture_ns"), Value::integer(capture_ns_)}});
        return Value::object({{Value::str(name_), frame}});
    }

  private:
    std::string name_;
    std::vector<uint64_t> dims_;
    std::vector<uint8_t> pixels_;
    int64_t capture_ns_ = 0;
};

}  // namespace rtinfer::example
