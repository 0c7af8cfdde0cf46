// The NCCL communicator (vwt::nccl) on one GPU, a job of one rank: its all-reduce (on the compute
// stream, and started on its own stream then finished) and broadcast leave a device buffer as it
// was, and a trainer runs through it. Every case skips with a message on a machine without a GPU.
// (Two or more GPUs: `mpirun -np N vwt train --device cuda`, see README.)
#include <catch2/catch.hpp>

#include <vector>

#include <vwt/train/nccl.hpp>
#include <vwt/train/trainer.hpp>
#include <vwt/vwt.hpp>

using device = vwt::cuda::backend<float>;

TEST_CASE("one rank: NCCL's all-reduce and broadcast keep a buffer, training runs through them") {
    if (!device::context::available()) {
        WARN("no CUDA device on this machine: case skipped");
        return;
    }
    vwt::train::mpi_environment mpi;
    const device::context ctx;
    vwt::train::nccl_communicator<device> comm(ctx);
    REQUIRE(comm.size() == 1);
    CHECK(comm.rank() == 0);
    std::vector<float> values(5000);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i % 97) - 3.0f;
    device::buffer<float> b(static_cast<vwt::index_t>(values.size()));
    device::upload(ctx, std::span<const float>(values), b.view());
    comm.all_reduce_sum(ctx, b.view());
    comm.start_all_reduce_sum(ctx, b.view().subview(0, 1000));
    comm.start_all_reduce_sum(ctx, b.view().subview(1000, 4000));
    comm.finish_all_reduces();
    comm.broadcast(ctx, b.view(), 0);
    std::vector<float> back(values.size());
    device::download(ctx, vwt::vector_view<const float, device::memory>(b.view()), std::span<float>(back));
    CHECK(back == values);
    double host[2] = {1.5, -2.0};
    comm.all_reduce_sum(std::span<double>(host));
    CHECK(host[0] == 1.5);

    const auto c = vwt::model_config::mup(vwt::dynamic_schedule({3, 32, 2, 2, 17, 64, {}}, {48, 16, 32}));
    std::vector<float> p;
    vwt::initialize_parameters(c, vwt::parameter_layout(c), 9, p);
    std::vector<int> t(3000);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int>((i * 7 + i / 5) % 17);
    vwt::train::train_options o;
    o.steps = 5;
    o.batch = 3;
    const auto losses = [&](vwt::train::communicator<device>* through) {
        vwt::train::trainer<device> tr(ctx, c, p, vwt::train::window_loader(t, 16, 0.1, 4, "pattern"), o, through);
        std::vector<double> l;
        tr.run([&](const vwt::train::step_report& r) { l.push_back(r.loss); });
        return l;
    };
    CHECK(losses(&comm) == losses(nullptr));
}
