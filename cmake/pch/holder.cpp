// Compiled only to make the precompiled header that the real targets reuse.
int main() { return 0; }
