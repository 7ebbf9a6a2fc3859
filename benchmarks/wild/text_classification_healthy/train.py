"""Text classification from scratch: IMDB-style reviews, TextVectorization, a 1D convnet.

Modelled on keras-io's examples/nlp/text_classification_from_scratch.py
(raw review strings in batches of 32 with a validation split, a custom
standardization that lowercases and strips `<br />` and punctuation, a
TextVectorization layer adapted on the text, the vectorization mapped over
the datasets, then `cache().prefetch(10)`; Embedding, Dropout, two strided
Conv1D, global max pooling, a sigmoid head; evaluate; an end-to-end model
taking raw strings), rewritten to run offline: synthetic reviews built in
memory instead of the downloaded aclImdb folders (so
`tf.data.Dataset.from_tensor_slices(...).batch(32)` where the example calls
`text_dataset_from_directory`), fewer reviews. Healthy: no planted problem.
"""

import re
import string

import numpy as np
import tensorflow as tf
from tensorflow import keras
from tensorflow.keras import layers

# Offline: IMDB-like reviews (25000 train / 25000 test -> 1280 / 320).
rng = np.random.default_rng(3)
GOOD = ["great", "wonderful", "moving", "brilliant", "superb", "funny", "touching"]
BAD = ["awful", "boring", "dull", "terrible", "weak", "predictable", "painful"]
FILLER = ["the", "film", "movie", "plot", "actors", "was", "and", "a", "story", "this", "it", "scene", "ending"]


def review(label):
    words = list(rng.choice(FILLER, rng.integers(40, 160)))
    mood = GOOD if label else BAD
    for i in rng.integers(0, len(words), 6):
        words[i] = str(rng.choice(mood))
    text = " ".join(words).capitalize() + "."
    return text.replace(" and ", " and<br /><br />", 1) + " 10/10!" * int(label)


def raw_dataset(n, batch_size, seed):
    labels = np.random.default_rng(seed).integers(0, 2, n)
    texts = [review(int(label)) for label in labels]
    return tf.data.Dataset.from_tensor_slices((texts, labels.astype("int32"))).batch(batch_size)


batch_size = 32
raw_train_ds = raw_dataset(1024, batch_size, seed=1337)
raw_val_ds = raw_dataset(256, batch_size, seed=1338)
raw_test_ds = raw_dataset(320, batch_size, seed=1339)

print(f"Number of batches in raw_train_ds: {raw_train_ds.cardinality()}")
print(f"Number of batches in raw_val_ds: {raw_val_ds.cardinality()}")
print(f"Number of batches in raw_test_ds: {raw_test_ds.cardinality()}")

for text_batch, label_batch in raw_train_ds.take(1):
    for i in range(5):
        print(text_batch.numpy()[i])
        print(label_batch.numpy()[i])


def custom_standardization(input_data):
    lowercase = tf.strings.lower(input_data)
    stripped_html = tf.strings.regex_replace(lowercase, "<br />", " ")
    return tf.strings.regex_replace(stripped_html, f"[{re.escape(string.punctuation)}]", "")


max_features = 20000
embedding_dim = 128
sequence_length = 500

vectorize_layer = layers.TextVectorization(
    standardize=custom_standardization,
    max_tokens=max_features,
    output_mode="int",
    output_sequence_length=sequence_length,
)
text_ds = raw_train_ds.map(lambda x, y: x)
vectorize_layer.adapt(text_ds)


def vectorize_text(text, label):
    text = tf.expand_dims(text, -1)
    return vectorize_layer(text), label


train_ds = raw_train_ds.map(vectorize_text)
val_ds = raw_val_ds.map(vectorize_text)
test_ds = raw_test_ds.map(vectorize_text)

train_ds = train_ds.cache().prefetch(buffer_size=10)
val_ds = val_ds.cache().prefetch(buffer_size=10)
test_ds = test_ds.cache().prefetch(buffer_size=10)

inputs = keras.Input(shape=(None,), dtype="int64")
x = layers.Embedding(max_features, embedding_dim)(inputs)
x = layers.Dropout(0.5)(x)
x = layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
x = layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
x = layers.GlobalMaxPooling1D()(x)
x = layers.Dense(128, activation="relu")(x)
x = layers.Dropout(0.5)(x)
predictions = layers.Dense(1, activation="sigmoid", name="predictions")(x)

model = keras.Model(inputs, predictions)
model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])

epochs = 2  # the example: 3
model.fit(train_ds, validation_data=val_ds, epochs=epochs)
model.evaluate(test_ds)

inputs = keras.Input(shape=(1,), dtype="string")
indices = vectorize_layer(inputs)
outputs = model(indices)
end_to_end_model = keras.Model(inputs, outputs)
end_to_end_model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
end_to_end_model.evaluate(raw_test_ds.map(lambda x, y: (tf.expand_dims(x, -1), y)))
