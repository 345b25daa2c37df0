// SPDX-License-Identifier: MIT
// Shared<T>: an immutable value shared by reference count, with value semantics. A Plan refers to its model and
// cluster through Shared handles, so that copying a plan (an undo step, a scenario, a result row, a partitioner's
// candidate) copies two pointers, not a profile of thousands of layers.
#pragma once

#include <memory>
#include <utility>

namespace pw::planner {

/// @brief A T that is never changed in place once shared: copies share one immutable instance; edit() gives a
/// private copy first when the instance is shared (copy on write). Never null. Compares by value (pointer
/// equality first, then T's ==).
template <class T> class Shared
{
public:
    Shared()
        : m_value(empty())
    {
    }
    Shared(T value) // NOLINT(google-explicit-constructor): a T is a Shared<T> of its own
        : m_value(std::make_shared<T>(std::move(value)))
        , m_created(true)
    {
    }
    Shared(std::shared_ptr<const T> value) // NOLINT(google-explicit-constructor)
        : m_value(value ? std::move(value) : empty())
    {
    }

    const T& operator*() const { return *m_value; }
    const T* operator->() const { return m_value.get(); }
    const T& get() const { return *m_value; }
    operator const T&() const { return *m_value; } // NOLINT(google-explicit-constructor): reads as a const T&
    /// The handle itself, to share the instance with a view or another plan.
    const std::shared_ptr<const T>& ptr() const { return m_value; }

    /// A T to change: this handle's own copy (made now when the instance is shared with anyone else).
    T& edit()
    {
        if (!m_created || m_value.use_count() != 1) {
            m_value = std::make_shared<T>(*m_value);
            m_created = true;
        }
        // Sole owner of an instance this handle created as a (non-const) T: changing it is safe.
        return const_cast<T&>(*m_value);
    }

    /// The same instance (no comparison of values needed).
    bool sameInstance(const Shared& other) const { return m_value == other.m_value; }
    friend bool operator==(const Shared& a, const Shared& b)
    {
        return a.m_value == b.m_value || *a.m_value == *b.m_value;
    }
    friend bool operator==(const Shared& a, const T& b) { return *a.m_value == b; }

private:
    /// One empty T shared by every default-constructed handle (a default Plan allocates nothing).
    static const std::shared_ptr<const T>& empty()
    {
        static const std::shared_ptr<const T> instance = std::make_shared<const T>();
        return instance;
    }

    std::shared_ptr<const T> m_value;
    bool m_created = false; ///< m_value was made by this handle (or one it was copied from) as a non-const T
};

} // namespace pw::planner
