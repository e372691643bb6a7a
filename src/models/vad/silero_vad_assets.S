/* The real Silero VAD v5 16 kHz weights (assets/vad), embedded so load_default() works from anywhere. */
  .section .rodata
  .balign 16
  .global mmserve_silero_vad_begin
  .global mmserve_silero_vad_end
mmserve_silero_vad_begin:
  .incbin MMSERVE_SILERO_VAD_WEIGHTS
mmserve_silero_vad_end:
  .section .note.GNU-stack,"",@progbits
