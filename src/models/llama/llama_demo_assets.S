/* llama2.c's stories260K and its tokenizer (assets/llama2c), embedded so `mmserve serve` can offer the demo
   decoder from anywhere (write_demo_stories in llama2c.cpp). */
  .section .rodata
  .balign 16
  .global mmserve_stories_begin
  .global mmserve_stories_end
mmserve_stories_begin:
  .incbin MMSERVE_STORIES_BIN
mmserve_stories_end:
  .balign 16
  .global mmserve_tok512_begin
  .global mmserve_tok512_end
mmserve_tok512_begin:
  .incbin MMSERVE_TOK512_BIN
mmserve_tok512_end:
  .section .note.GNU-stack,"",@progbits
