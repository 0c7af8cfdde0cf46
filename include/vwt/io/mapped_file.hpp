// A file mapped into memory, read-only to the file: pages are read when first touched, writes
// (an optimizer step on weights used in place) go to private copies and never reach the file.
// Where the platform has no mmap (not POSIX), the file is read into memory instead, with the
// same interface.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#if __has_include(<sys/mman.h>) && __has_include(<fcntl.h>) && __has_include(<unistd.h>)
#define VWT_HAS_MMAP 1
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#else
#include <fstream>
#endif

#include "../error.hpp"

namespace vwt::io {

class mapped_file {
public:
    explicit mapped_file(std::filesystem::path path) : path_(std::move(path)) {
        std::error_code ec;
        const auto status = std::filesystem::status(path_, ec);
        if (ec || !std::filesystem::exists(status)) fail("no such file");
        if (!std::filesystem::is_regular_file(status)) fail("not a regular file");
#if defined(VWT_HAS_MMAP)
        const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) fail("cannot open: ", std::strerror(errno));
        struct stat st {};
        if (::fstat(fd, &st) != 0) {
            const int e = errno;
            ::close(fd);
            fail("cannot stat: ", std::strerror(e));
        }
        size_ = static_cast<std::size_t>(st.st_size);
        if (size_ > 0) {
            void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
            if (p == MAP_FAILED) {
                const int e = errno;
                ::close(fd);
                fail("cannot map ", size_, " bytes: ", std::strerror(e));
            }
            data_ = static_cast<std::uint8_t*>(p);
        }
        ::close(fd);  // the mapping keeps the file
#else
        std::ifstream f(path_, std::ios::binary);
        if (!f) fail("cannot open");
        copy_.resize(static_cast<std::size_t>(std::filesystem::file_size(path_)));
        if (!copy_.empty() && !f.read(reinterpret_cast<char*>(copy_.data()), static_cast<std::streamsize>(copy_.size())))
            fail("cannot read");
        data_ = copy_.data();
        size_ = copy_.size();
#endif
    }
    mapped_file(const mapped_file&) = delete;
    mapped_file& operator=(const mapped_file&) = delete;
    ~mapped_file() {
#if defined(VWT_HAS_MMAP)
        if (data_) ::munmap(data_, size_);
#endif
    }

    const std::filesystem::path& path() const { return path_; }
    std::span<const std::uint8_t> bytes() const { return {data_, size_}; }
    // The same bytes, writable: copy-on-write, the file never changes.
    std::span<std::uint8_t> private_bytes() { return {data_, size_}; }

    // Hands the whole pages inside `part` back to the system (they are read again if touched
    // again): after a tensor has been converted into memory of its own, its file pages need not
    // stay resident. Only pages never written are handed back; a no-op without mmap.
    void release(std::span<const std::uint8_t> part) const {
#if defined(VWT_HAS_MMAP)
        const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
        const auto begin = (reinterpret_cast<std::uintptr_t>(part.data()) + page - 1) / page * page;
        const auto end = (reinterpret_cast<std::uintptr_t>(part.data()) + part.size()) / page * page;
        if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
#else
        (void)part;
#endif
    }

private:
    template <class... P>
    [[noreturn]] void fail(const P&... p) const {
        vwt::detail::fail("'", path_.string(), "': ", p...);
    }

    std::filesystem::path path_;
    std::uint8_t* data_ = nullptr;
    std::size_t size_ = 0;
#if !defined(VWT_HAS_MMAP)
    std::vector<std::uint8_t> copy_;
#endif
};

}  // namespace vwt::io
