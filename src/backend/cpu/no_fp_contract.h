// Included first by the CPU files of the transformer ops (ops_layernorm.cpp, ops_softmax.cpp,
// ops_gelu.cpp, ops_embedding.cpp): no contraction of a*b+c into an FMA in the rest of the
// translation unit (GCC contracts by default, also in ISO mode). The CUDA twins are compiled with
// --fmad=false, and both must round every product and sum alike. First, before any other include,
// so every function of the file, the inline ones of transformer_rows.h and tmath included, has
// the same options. No include guard: each file that includes it gets the pragma.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
