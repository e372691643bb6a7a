/* The real CLIP tokenizer files, embedded so the demo model can be written from anywhere (see clip_demo.cpp). */
  .section .rodata
  .balign 16
  .global mmserve_clip_vocab_begin
  .global mmserve_clip_vocab_end
mmserve_clip_vocab_begin:
  .incbin MMSERVE_CLIP_VOCAB
mmserve_clip_vocab_end:
  .balign 16
  .global mmserve_clip_merges_begin
  .global mmserve_clip_merges_end
mmserve_clip_merges_begin:
  .incbin MMSERVE_CLIP_MERGES
mmserve_clip_merges_end:
  .section .note.GNU-stack,"",@progbits
