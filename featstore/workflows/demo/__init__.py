"""The embedded default: real bundled data (scikit-learn digits, scikit-image photographs,
textures and faces), a small ResNet trained in-process, and the end-to-end demo pipeline."""
