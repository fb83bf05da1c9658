// Compiled only to make the precompiled headers that the real targets reuse.
int main() { return 0; }
