// tests/test_topk.cpp — the topk op against its float64 reference (placeholder).
#include <gtest/gtest.h>
