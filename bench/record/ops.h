/* Op names the emitting benchmarks cycle through: names of the length and variety of
 * PyTorch's aten ops, since the recorder copies and interns each name. */
#define OP_COUNT 20
static const char *const OP_NAMES[OP_COUNT] = {
    "aten::mm", "aten::add", "aten::addmm", "aten::relu", "aten::conv2d",
    "aten::convolution", "aten::_convolution", "aten::max_pool2d", "aten::linear", "aten::t",
    "aten::view", "aten::empty", "aten::zeros", "aten::mul", "aten::sum",
    "aten::copy_", "aten::to", "aten::cross_entropy_loss", "aten::log_softmax", "aten::nll_loss",
};
