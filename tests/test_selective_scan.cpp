// tests/test_selective_scan.cpp — the selective_scan op against its float64 reference (placeholder).
#include <gtest/gtest.h>
