// The decode engine behind `vwt serve`: requests wait in a bounded queue for one of a fixed number of
// slots (each a KV cache, a sampler and a random stream); one thread runs every busy slot forward
// together, one model call per step (continuous batching: a new request's prompt joins the next
// step beside the others' single tokens), and hands each slot's sampled token to its request.
// A request alone in the engine gets the tokens vwt::generate would give it (the same forward
// rows, sampler and random stream).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <vwt/vwt.hpp>

namespace vwt::cli {

// A sampled token and, when the request asked for them, log-probabilities under the model (the
// log-softmax of its logits, before temperature and truncation): the token's own and the `top`
// most likely tokens', most likely first.
struct sampled_token {
    int id = 0;
    float logprob = 0;
    std::vector<std::pair<int, float>> top;
};

// One request's parameters and its results, shared by the HTTP handler (which waits on it) and the
// engine (which fills it).
struct serve_request {
    std::vector<int> prompt;
    int max_tokens = 16;
    sampling_options sampling{};
    std::uint64_t seed = 0;
    std::vector<int> stop_tokens;
    std::vector<std::string> stop_strings;  // the handler's: the text ends before the first of them
    int logprobs = -1;  // -1: none; k >= 0: each token's log-probability and the top k alternatives'

    std::mutex mutex;
    std::condition_variable changed;
    std::deque<sampled_token> tokens;  // sampled, not yet taken by the handler
    int completion_tokens = 0;         // sampled in all
    bool done = false;
    std::string finish_reason;  // "stop", "length", "cancelled" or "error"
    std::string error;
    std::atomic<bool> cancelled{false};     // set by the handler when its client goes away
    std::atomic<bool> stop_reached{false};  // set by the handler when the text reached a stop string

    // Waits up to `wait` for tokens or the end; returns the tokens taken.
    std::vector<sampled_token> take(std::chrono::milliseconds wait) {
        std::unique_lock lock(mutex);
        changed.wait_for(lock, wait, [&] { return !tokens.empty() || done; });
        std::vector<sampled_token> out(std::make_move_iterator(tokens.begin()), std::make_move_iterator(tokens.end()));
        tokens.clear();
        return out;
    }
    bool finished() {
        std::lock_guard lock(mutex);
        return done && tokens.empty();
    }
};

struct serve_counters {
    std::atomic<std::int64_t> requests{0}, rejected{0}, cancelled{0}, prompt_tokens{0}, generated_tokens{0}, steps{0};
    std::atomic<int> busy_slots{0}, queued{0};
};

template <class B>
class serve_engine {
public:
    using context = typename B::context;

    // slots: requests decoded together; queue: requests that may wait for a slot; max_prompt: the
    // longest prompt accepted (a step holds at most one prompt beside the slots' single tokens).
    serve_engine(const model<B>& m, const context& ctx, int slots, int queue, int max_prompt, kv_dtype kv)
        : model_(m), ctx_(ctx), queue_limit_(queue), max_prompt_(max_prompt),
          workspace_(m.make_workspace(ctx, max_prompt + slots, m.schedule().dims.context, kv)) {
        if (slots < 1) detail::fail("--slots: must be at least 1, got ", slots);
        if (queue < 0) detail::fail("--queue: must be >= 0, got ", queue);
        for (int i = 0; i < slots; ++i) slots_.push_back(std::make_unique<slot>(m, kv));
        worker_ = std::thread([this] { loop(); });
    }
    ~serve_engine() {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        wake_.notify_all();
        worker_.join();
    }
    serve_engine(const serve_engine&) = delete;
    serve_engine& operator=(const serve_engine&) = delete;

    // Queues the request; false when the queue is full (the handler answers 503).
    bool submit(std::shared_ptr<serve_request> r) {
        if (r->prompt.empty() || static_cast<int>(r->prompt.size()) > max_prompt_)
            detail::fail("serve: a prompt of ", r->prompt.size(), " tokens (1 to ", max_prompt_, ")");
        {
            std::lock_guard lock(mutex_);
            if (static_cast<int>(waiting_.size()) >= queue_limit_ + free_slots()) {
                ++counters_.rejected;
                return false;
            }
            waiting_.push_back(std::move(r));
            counters_.queued = static_cast<int>(waiting_.size());
            ++counters_.requests;
        }
        wake_.notify_one();
        return true;
    }
    const serve_counters& counters() const { return counters_; }
    int slots() const { return static_cast<int>(slots_.size()); }

private:
    struct slot {
        kv_cache<B> cache;
        sampler draw;
        std::mt19937_64 rng;
        std::vector<int> history;
        std::shared_ptr<serve_request> request;
        bool prefilled = false;
        int last = 0;
        slot(const model<B>& m, kv_dtype kv) : cache(m.make_cache(m.schedule().dims.context, kv)), draw(m.vocab()) {}
    };

    int free_slots() const {
        int n = 0;
        for (const auto& s : slots_) n += s->request ? 0 : 1;
        return n;
    }

    void finish(slot& s, const std::string& reason, const std::string& error = {}) {
        {
            std::lock_guard lock(s.request->mutex);
            s.request->done = true;
            s.request->finish_reason = reason;
            s.request->error = error;
        }
        s.request->changed.notify_all();
        std::lock_guard lock(mutex_);  // submit() counts the free slots
        s.request.reset();
    }

    // The sampled token's log-probability and the `top` largest, from the row's log-softmax.
    template <class T>
    void with_logprobs(std::span<const T> row, int top, sampled_token& out) {
        double largest = -std::numeric_limits<double>::infinity();
        for (const T v : row) largest = std::max(largest, static_cast<double>(v));
        double sum = 0;
        for (const T v : row) sum += std::exp(static_cast<double>(v) - largest);
        const double log_norm = largest + std::log(sum);
        out.logprob = static_cast<float>(static_cast<double>(row[static_cast<std::size_t>(out.id)]) - log_norm);
        order_.resize(row.size());
        std::iota(order_.begin(), order_.end(), 0);
        const auto k = std::min<std::size_t>(static_cast<std::size_t>(top), row.size());
        std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k), order_.end(), [&](int a, int b) {
            const auto va = row[static_cast<std::size_t>(a)], vb = row[static_cast<std::size_t>(b)];
            return va > vb || (va == vb && a < b);
        });
        out.top.clear();
        for (std::size_t i = 0; i < k; ++i)
            out.top.emplace_back(order_[i], static_cast<float>(static_cast<double>(row[static_cast<std::size_t>(order_[i])]) - log_norm));
    }

    void loop() {
        std::vector<sequence_input<B>> inputs;
        std::vector<slot*> stepped;
        std::vector<typename B::compute_type> logits;
        const int vocab = model_.vocab();
        for (;;) {
            {
                std::unique_lock lock(mutex_);
                wake_.wait(lock, [&] { return stopping_ || !waiting_.empty() || free_slots() < slots(); });
                if (stopping_) break;
                for (auto& s : slots_) {
                    if (s->request || waiting_.empty()) continue;
                    s->request = std::move(waiting_.front());
                    waiting_.pop_front();
                    s->cache.clear();
                    s->rng.seed(s->request->seed);
                    s->history = s->request->prompt;
                    s->prefilled = false;
                    counters_.prompt_tokens += static_cast<std::int64_t>(s->request->prompt.size());
                }
                counters_.queued = static_cast<int>(waiting_.size());
            }
            // This step's sequences: every prefilled slot's last token, and at most one prompt.
            inputs.clear();
            stepped.clear();
            bool prompt_taken = false;
            for (auto& s : slots_) {
                if (!s->request) continue;
                if (s->request->cancelled) {
                    ++counters_.cancelled;
                    finish(*s, "cancelled");
                    continue;
                }
                if (s->request->stop_reached) {
                    finish(*s, "stop");
                    continue;
                }
                if (!s->prefilled && prompt_taken) continue;
                prompt_taken = prompt_taken || !s->prefilled;
                inputs.push_back({&s->cache, s->prefilled ? std::span<const int>(&s->last, 1) : std::span<const int>(s->request->prompt)});
                stepped.push_back(s.get());
            }
            counters_.busy_slots = slots() - free_slots();
            if (inputs.empty()) continue;
            try {
                const auto out = model_.forward(ctx_, workspace_, std::span<const sequence_input<B>>(inputs), logits_mode::last);
                logits.resize(static_cast<std::size_t>(out.rows()) * static_cast<std::size_t>(vocab));
                B::download(ctx_, vector_view<const typename B::compute_type, typename B::memory>(workspace_.logits_vector(out.rows())),
                            std::span(logits));
            } catch (const std::exception& e) {
                for (auto* s : stepped) finish(*s, "error", e.what());
                continue;
            }
            ++counters_.steps;
            for (std::size_t i = 0; i < stepped.size(); ++i) {
                slot& s = *stepped[i];
                auto& r = *s.request;
                const std::span<const typename B::compute_type> row(logits.data() + i * static_cast<std::size_t>(vocab),
                                                                    static_cast<std::size_t>(vocab));
                const int token = s.draw.sample(row, r.sampling, s.rng, s.history);
                sampled_token out{token, 0.0f, {}};
                if (r.logprobs >= 0) with_logprobs(row, r.logprobs, out);
                s.history.push_back(token);
                s.prefilled = true;
                s.last = token;
                ++counters_.generated_tokens;
                int produced = 0;
                {
                    std::lock_guard lock(r.mutex);
                    r.tokens.push_back(std::move(out));
                    produced = ++r.completion_tokens;
                }
                r.changed.notify_all();
                if (std::find(r.stop_tokens.begin(), r.stop_tokens.end(), token) != r.stop_tokens.end()) finish(s, "stop");
                else if (produced >= r.max_tokens) finish(s, "length");
            }
            counters_.busy_slots = slots() - free_slots();
        }
        for (auto& s : slots_)
            if (s->request) finish(*s, "cancelled");
        std::lock_guard lock(mutex_);
        for (auto& r : waiting_) {
            {
                std::lock_guard request_lock(r->mutex);
                r->done = true;
                r->finish_reason = "cancelled";
            }
            r->changed.notify_all();
        }
    }

    const model<B>& model_;
    context ctx_;
    int queue_limit_, max_prompt_;
    forward_workspace<B> workspace_;
    std::vector<std::unique_ptr<slot>> slots_;
    std::mutex mutex_;  // guards waiting_, slot assignment and stopping_
    std::condition_variable wake_;
    std::deque<std::shared_ptr<serve_request>> waiting_;
    bool stopping_ = false;
    serve_counters counters_;
    std::vector<int> order_;  // with_logprobs()'s scratch
    std::thread worker_;
};

}  // namespace vwt::cli
