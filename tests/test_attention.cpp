// tests/test_attention.cpp — the attention op against its float64 reference (placeholder).
#include <gtest/gtest.h>
