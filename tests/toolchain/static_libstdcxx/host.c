/* Stands for Python: a C program, so the shared libstdc++ is not in its global scope; it loads the
   dependency (as `import torch` loads libtorch) and then the module, each RTLD_LOCAL, and prints
   what the module formats. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: host DEPENDENCY MODULE\n");
    return 2;
  }
  void* dependency = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  void* module = dependency ? dlopen(argv[2], RTLD_NOW | RTLD_LOCAL) : NULL;
  if (module == NULL) {
    fprintf(stderr, "host: %s\n", dlerror());
    return 2;
  }
  int (*warm_up)(void) = (int (*)(void))dlsym(dependency, "dependencyWarmUp");
  const char* (*number_text)(unsigned long) =
      (const char* (*)(unsigned long))dlsym(module, "numberText");
  if (warm_up == NULL || number_text == NULL) {
    fprintf(stderr, "host: a function is missing\n");
    return 2;
  }
  warm_up();
  printf("%s\n", number_text(42));
  return 0;
}
